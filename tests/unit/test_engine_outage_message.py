"""What a run says when its engine stops answering: plain words first, the raw error last.

The engine is a real Docker SDK client pinging a unix socket nobody serves (the error the
SDK raises for a stopped engine); the watch, the run's state and its halt are the real ones.
"""

from __future__ import annotations

from pathlib import Path

import docker
from harness.config import SandboxConfig
from harness.errors import EXIT_ENGINE_OUTAGE
from harness.records.status import RunState
from harness.runner.events import RunEvents
from harness.runner.faults import Halting
from harness.runner.outage import DETAIL_CHARS, detail, wait_words, watch_engine
from sandbox.backend import CloseReport, Sandbox, SandboxSpec
from sandbox.docker.engine import ping
from sandbox.plugin import BackendOptions, SandboxBackend


class _StoppedEngine(SandboxBackend):
    """A backend whose engine's socket is gone (as after ``systemctl stop docker``)."""

    name = "docker"

    def __init__(self, socket_path: Path) -> None:
        super().__init__(BackendOptions("r", SandboxConfig(backend="docker")))
        self.address = f"unix://{socket_path}"

    def make_sandbox(self, spec: SandboxSpec) -> Sandbox:
        raise AssertionError("no trial starts while the engine is away")

    def health(self) -> str | None:
        return ping(docker.APIClient(base_url=self.address, version="1.41", timeout=2))

    def engine_address(self) -> str:
        return self.address

    def close(self) -> CloseReport:
        return CloseReport()


class _Said(RunEvents):
    def __init__(self) -> None:
        self.messages: list[str] = []

    def message(self, text: str) -> None:
        self.messages.append(text)


def test_outage_message_says_where_how_long_and_how_to_go_on(tmp_path: Path) -> None:
    backend = _StoppedEngine(tmp_path / "docker.sock")
    raw = backend.health()
    assert raw is not None  # the SDK's own words, e.g. ('Connection aborted.', ...)
    run_dir = tmp_path / "runs" / "r"
    events, log = _Said(), list[str]()
    state = RunState(name="r", run_dir=run_dir, planned=3)
    halting = Halting()
    watch = watch_engine(
        backend, wait_sec=0.5, run_dir=run_dir, events=events, state=state,
        log=log.append, halting=halting,
    )  # fmt: skip
    watch.start()
    try:
        assert halting.event.wait(30), "the watch gives up once the wait is over"
    finally:
        watch.stop()

    [said] = events.messages
    plain, _, error = said.partition("(error: ")
    assert plain.startswith(f"docker engine unreachable at {backend.address} since "), said
    assert "no trial starts until it answers again. Start it: the run waits up to 0.5 s" in plain
    assert f"continue with: harness run --resume {run_dir}" in plain
    assert "Ctrl-C stops it now" in plain
    # The raw error comes last, as an aside: one line, short.
    assert error == detail(raw) + ")" and "\n" not in said
    assert state.paused is not None
    reason = state.paused["reason"]
    assert reason == f"docker engine unreachable at {backend.address} (error: {error}"
    assert halting.halt is not None and halting.halt.exit_code == EXIT_ENGINE_OUTAGE
    stopped = halting.halt.message(1, 3, run_dir)
    assert stopped.startswith(f"stopped: the docker engine at {backend.address} has been ")
    assert "the run waited 0.5 s for it" in stopped
    assert stopped.endswith(
        f"start the docker engine, then continue with: harness run --resume {run_dir}"
    )


def test_the_raw_error_is_one_short_line() -> None:
    raw = "Traceback (most recent call last):\n  File 'x'\n" + "boom " * 100
    short = detail(raw)
    assert "\n" not in short and len(short) == DETAIL_CHARS and short.endswith("…")
    assert detail("  refused\n") == "refused"


def test_waits_read_as_people_say_them() -> None:
    assert wait_words(5) == "5 s" and wait_words(1800) == "30 min" and wait_words(90) == "90 s"
