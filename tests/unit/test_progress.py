"""The run displays: plain lines, the rich live view's content, and how one is chosen."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console

from harness.cli.progress import PlainDisplay, QuietDisplay, RichDisplay, make_display
from harness.records import AgentRef, SandboxRef, TaskRef, TrialError, TrialRecord, TrialStatus
from harness.records.status import RunState
from harness.runner import RunStart

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _record(trial_id: str, status: str, reward: float | None) -> TrialRecord:
    errors = [] if status == "completed" else [TrialError(type="X", message="boom", phase="x")]
    return TrialRecord(
        id=trial_id,
        task=TaskRef(name="t", key="t", hash="h", path="/t"),
        agent=AgentRef(name="nop"),
        sandbox=SandboxRef(backend="local"),
        status=TrialStatus(status),
        ok=status == "completed",
        reward=reward,
        errors=errors,
        started_at=T0,
        finished_at=T0,
        attempt=1,
    )


def _start(tmp_path: Path) -> RunStart:
    state = RunState(name="run-x", run_dir=tmp_path, planned=4)
    return RunStart(
        name="run-x",
        run_dir=tmp_path,
        state=state,
        planned=4,
        to_run=4,
        tasks=2,
        agent="nop",
        sandbox="local",
        invocation=1,
    )


def _console(*, terminal: bool = False) -> tuple[Console, io.StringIO]:
    buffer = io.StringIO()
    console = Console(file=buffer, width=160, force_terminal=terminal, color_system=None)
    return console, buffer


def test_plain_display_prints_one_line_per_event(tmp_path: Path) -> None:
    console, buffer = _console()
    display = PlainDisplay(console)
    display.run_started(_start(tmp_path))
    display.retrying(_record("t.r0", "environment_error", None), 1.5)
    display.trial_finished(_record("t.r0", "completed", 1.0), 1, 4)
    display.message("interrupted: stopping")
    lines = buffer.getvalue().splitlines()
    assert lines == [
        "running 4 trial(s) of 2 task(s) with agent nop in the local sandbox",
        "retry t.r0: attempt 1 ended environment_error (boom); attempt 2 in 1.5s",
        "[1/4] t.r0: completed reward=1",
        "interrupted: stopping",
    ]


def test_rich_view_shows_progress_running_trials_and_success(tmp_path: Path) -> None:
    console, buffer = _console()
    display = RichDisplay(console)
    start = _start(tmp_path)
    start.state.trial_started("task-a.r0", "task-a", 1)
    start.state.phase("task-a.r0", "execute")
    start.state.trial_started("task-b.r0", "task-b", 2)
    start.state.trial_finished(_record("done.r0", "completed", 1.0))
    display._start = start
    display._bar.update(display._task_id, total=4, completed=1)
    console.print(display)
    text = buffer.getvalue()
    assert "1/4" in text and "ETA" in text
    assert "task-a.r0" in text and "execute" in text
    assert "task-b.r0" in text and "prepare" in text
    assert "done 1/4" in text and "success 1/1 (100.0%)" in text


def test_display_choice(tmp_path: Path) -> None:
    terminal, _ = _console(terminal=True)
    pipe, _ = _console(terminal=False)
    assert isinstance(make_display(None, terminal, as_json=False), RichDisplay)
    assert type(make_display(None, pipe, as_json=False)) is PlainDisplay
    assert isinstance(make_display(None, terminal, as_json=True), QuietDisplay)
    assert isinstance(make_display("rich", pipe, as_json=True), RichDisplay)
    assert isinstance(make_display("none", terminal, as_json=False), QuietDisplay)
