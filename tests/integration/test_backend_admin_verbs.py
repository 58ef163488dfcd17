"""The backends' admin verbs through the one protocol: ``harness doctor`` and ``cleanup``.

Every installed backend is asked (the built-ins and a plug-in registered in-process), each
through :class:`sandbox.plugin.SandboxBackend`'s ``doctor`` and ``remove_leftovers``; a
backend that cannot reach what it cleans fails the cleanup only after every other one has
cleaned. Real engine, real cgroups: nothing here is mocked but the plug-ins themselves.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from typing_extensions import override

from harness.backends import upkeep
from harness.backends.registry import SANDBOXES
from harness.errors import UsageError
from sandbox.backend import CloseReport, Sandbox, SandboxSpec
from sandbox.plugin import DoctorReport, Guarantee, Leftovers, SandboxBackend

calls: list[tuple[str, str | None]] = []


class _Reachable(SandboxBackend):
    """A plug-in whose leftovers are always there to remove."""

    @override
    def make_sandbox(self, spec: SandboxSpec) -> Sandbox:
        raise NotImplementedError

    @override
    def close(self) -> CloseReport:
        return CloseReport()

    @classmethod
    @override
    def doctor(cls, report: DoctorReport) -> None:
        report.checks.append(("reachable backend", "answers"))
        report.guarantees.append(Guarantee("limit: widgets", True, "the widget cap"))

    @classmethod
    @override
    def remove_leftovers(cls, run: str | None) -> Leftovers:
        calls.append(("reachable", run))
        return Leftovers(removed={"widget": ["w1", "w2"]}, errors=["w3: still in use"])


class _Unreachable(_Reachable):
    """A plug-in whose engine is away."""

    @classmethod
    @override
    def remove_leftovers(cls, run: str | None) -> Leftovers:
        calls.append(("unreachable", run))
        raise UsageError("the widget engine is away: start it with `widgetd`")


@pytest.fixture
def plugins() -> Iterator[None]:
    calls.clear()
    SANDBOXES.register("aa-unreachable", _Unreachable)
    SANDBOXES.register("zz-reachable", _Reachable)
    yield
    SANDBOXES.unregister("aa-unreachable")
    SANDBOXES.unregister("zz-reachable")


def test_cleanup_asks_every_backend_and_an_unreachable_one_fails_it_last(plugins: None) -> None:
    run = f"admin-verbs-{uuid.uuid4().hex[:8]}"  # no such run: the built-ins remove nothing
    with pytest.raises(UsageError) as caught:
        upkeep.cleanup(run=run)
    assert "aa-unreachable: the widget engine is away" in str(caught.value)
    # The unreachable one came first by name, and the later one still cleaned.
    assert calls == [("unreachable", run), ("reachable", run)]


def test_cleanup_sums_what_each_backend_removed(plugins: None) -> None:
    SANDBOXES.unregister("aa-unreachable")
    run = f"admin-verbs-{uuid.uuid4().hex[:8]}"
    report = upkeep.cleanup(run=run)
    assert report.removed["widget"] == ["w1", "w2"]
    assert report.removed["container"] == [] and report.removed["cgroup"] == []
    assert "w3: still in use" in report.errors
    assert calls == [("reachable", run)]


def test_a_backend_that_does_not_load_is_a_doctor_problem_and_a_cleanup_error(
    plugins: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    SANDBOXES.unregister("aa-unreachable")
    # A real installed distribution whose entry point names a module that is not there.
    dist = tmp_path / "zz_broken-0.1.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: zz-broken\nVersion: 0.1\n")
    (dist / "entry_points.txt").write_text(
        "[harness.sandboxes]\nzz-broken = zz_broken_missing.backend:Backend\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    report = upkeep.doctor()
    cleaned = upkeep.cleanup(run=f"admin-verbs-{uuid.uuid4().hex[:8]}")
    assert any("zz-broken" in problem for problem in report.problems), report.problems
    assert any("zz-broken" in error for error in cleaned.errors), cleaned.errors


def test_doctor_has_each_backends_rows_the_local_sandboxes_first(plugins: None) -> None:
    report = upkeep.doctor()
    checks = [name for name, _ in report.checks]
    assert checks[0] == "running as root"
    assert checks[1].startswith("local sandbox")
    assert "docker engine" in checks and "reachable backend" in checks
    assert checks.index(checks[1]) < checks.index("docker engine")
    assert Guarantee("limit: widgets", True, "the widget cap") in report.guarantees
    assert any(row.name.startswith("network") for row in report.guarantees)
