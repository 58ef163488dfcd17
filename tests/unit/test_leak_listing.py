"""The leak sweep lists containers without inspecting them (a fake engine API).

A container the engine is removing ("Removal In Progress", which can last until the engine
restarts) is listed but answers 404 to an inspect: the SDK's ``containers.list`` then
raised, and ``harness sandbox cleanup`` (and every resume's sweep) died with a traceback.
The state cannot be made on demand on a real engine, hence the fake.
"""

from __future__ import annotations

from typing import Any

import docker.errors
import requests

from sandbox.docker.engine import LeakReport, _containers, _remove_containers


class FakeApi:
    """Answers ``containers`` from a fixed list; records and answers ``remove_container``."""

    def __init__(self, entries: list[dict[str, Any]], gone: set[str]) -> None:
        self.entries = entries
        self.gone = gone
        self.removed: list[str] = []

    def containers(self, *, all: bool, filters: dict[str, Any]) -> list[dict[str, Any]]:
        assert all
        return self.entries

    def inspect_container(self, cid: str) -> dict[str, Any]:
        raise AssertionError("the sweep must not inspect")

    def remove_container(self, cid: str, *, force: bool, v: bool) -> None:
        if cid in self.gone:
            response = requests.Response()
            response.status_code = 404
            raise docker.errors.NotFound("no such container", response=response)
        self.removed.append(cid)


class FakeClient:
    def __init__(self, api: FakeApi) -> None:
        self.api = api


def test_a_container_being_removed_is_skipped_and_a_vanished_one_is_no_error() -> None:
    api = FakeApi(
        [
            {"Id": "a" * 64, "Names": ["/harness-0123456789-t1"], "Labels": {}, "State": "exited"},
            {"Id": "b" * 64, "Names": None, "Labels": None, "State": "removing"},
            {"Id": "c" * 64, "Names": ["/harness-0123456789-t2"], "Labels": {}, "State": "exited"},
        ],
        gone={"c" * 64},
    )
    client: Any = FakeClient(api)
    listed = _containers(client, {"label": ["org.harness.managed=1"]})
    assert [c.name for c in listed] == ["harness-0123456789-t1", "", "harness-0123456789-t2"]
    report = LeakReport()
    _remove_containers(client, listed, report)
    assert api.removed == ["a" * 64]
    assert report.containers == ["harness-0123456789-t1"] and report.errors == []
