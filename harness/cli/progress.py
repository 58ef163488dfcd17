"""Live progress of ``harness run``: a rich live view, plain lines, or nothing.

``--display rich`` (the default when stderr is a terminal) shows an overall bar with ETA,
the running trials with their phase and how long they have been in it, and the success so
far; failed trials and retries are printed above it. ``--display plain`` (the default
otherwise) prints one line per finished trial, retries and messages, safe for logs and
pipes. ``--display none`` prints nothing until the final summary.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime
from typing import Literal

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskProgressColumn,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)
from rich.table import Table
from rich.text import Text
from typing_extensions import override

from harness.cli.display import progress_line
from harness.records import TrialRecord
from harness.runner import RunEvents, RunOutcome, RunStart

DisplayName = Literal["rich", "plain", "none"]
#: Running trials shown in the live view (the rest are counted).
MAX_RUNNING_ROWS = 12


def _retry_line(record: TrialRecord, delay: float) -> str:
    first = f" ({record.errors[0].message})" if record.errors else ""
    return (
        f"retry {record.id}: attempt {record.attempt} ended {record.status}{first}; "
        f"attempt {record.attempt + 1} in {delay:.1f}s"
    )


def _start_lines(start: RunStart) -> list[str]:
    lines = []
    if start.resume is not None:
        lines.append(
            f"resuming {start.name} (invocation {start.invocation}): {start.resume.describe()}"
        )
    lines.append(
        f"running {start.to_run} trial(s) of {start.tasks} task(s) with agent {start.agent} "
        f"in the {start.sandbox} sandbox"
    )
    return lines


class QuietDisplay(RunEvents):
    """``--display none``: nothing until the final summary but warnings."""

    def __init__(self, console: Console) -> None:
        self.console = console

    @override
    def warning(self, text: str) -> None:
        self.console.print(Text.assemble(("warning:", "yellow"), " ", text))


class PlainDisplay(QuietDisplay):
    """``--display plain``: one line per finished trial, retry and message."""

    @override
    def run_started(self, start: RunStart) -> None:
        for line in _start_lines(start):
            self.console.print(line, markup=False)

    @override
    def retrying(self, record: TrialRecord, delay: float) -> None:
        self.console.print(_retry_line(record, delay), markup=False)

    @override
    def trial_finished(self, record: TrialRecord, done: int, total: int) -> None:
        self.console.print(progress_line(record, done, total), markup=False)

    @override
    def message(self, text: str) -> None:
        self.console.print(Text(text, style="yellow"))


def _ago(since: datetime, now: datetime) -> str:
    seconds = max((now - since).total_seconds(), 0.0)
    if seconds < 60:
        return f"{seconds:.0f}s"
    minutes, seconds = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes}m{seconds:02d}s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m"


class RichDisplay(PlainDisplay):
    """``--display rich``: a live view on the console (stderr), redrawn 4 times a second."""

    def __init__(self, console: Console) -> None:
        super().__init__(console)
        self._start: RunStart | None = None
        self._live: Live | None = None
        self._lock = threading.Lock()
        self._bar = Progress(
            TextColumn("[bold]trials"),
            BarColumn(),
            MofNCompleteColumn(),
            TaskProgressColumn(),
            TextColumn("elapsed"),
            TimeElapsedColumn(),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=console,
            auto_refresh=False,
        )
        self._task_id = self._bar.add_task("trials", total=1, completed=0)

    @override
    def run_started(self, start: RunStart) -> None:
        super().run_started(start)
        self._start = start
        self._bar.update(self._task_id, total=start.planned, completed=start.state.done)
        self._live = Live(
            self, console=self.console, refresh_per_second=4, transient=True, redirect_stderr=False
        )
        self._live.start()

    @override
    def trial_finished(self, record: TrialRecord, done: int, total: int) -> None:
        self._bar.update(self._task_id, completed=done, total=total)
        if not record.ok:
            self.console.print(progress_line(record, done, total), markup=False)

    @override
    def run_finished(self, outcome: RunOutcome) -> None:
        live, self._live = self._live, None
        if live is not None:
            live.stop()

    def __rich__(self) -> RenderableType:
        start = self._start
        if start is None:
            return Text("")
        snapshot = start.state.snapshot()
        counts, success = snapshot["counts"], snapshot["success"]
        now = datetime.now(UTC)
        running = start.state.running()
        table = Table(box=None, pad_edge=False, show_header=bool(running), expand=False)
        for column in ("trial", "attempt", "phase", "in phase", "running"):
            table.add_column(column, no_wrap=True, overflow="ellipsis", max_width=60)
        for trial in running[:MAX_RUNNING_ROWS]:
            table.add_row(
                trial.id,
                str(trial.attempt),
                "building image" if trial.phase == "build" else trial.phase,
                _ago(trial.phase_started_at, now),
                _ago(trial.started_at, now),
            )
        rows: list[RenderableType] = [self._bar.get_renderable(), table]
        if len(running) > MAX_RUNNING_ROWS:
            rows.append(Text(f"… and {len(running) - MAX_RUNNING_ROWS} more running"))
        # Over every trial done (an ungraded one counts 0), as the summary's headline; the
        # graded-only mean is secondary.
        rate = success["rate_done"]
        mean = success["mean_reward_done"]
        graded_mean = success["mean_reward"]
        errors = counts["done"] - counts["by_status"].get("completed", 0)
        line = (
            f"done {counts['done']}/{counts['planned']} · running {counts['running']} · "
            f"errors {errors} · success {success['successes']}/{counts['done']}"
            + (f" ({rate * 100:.1f}%)" if rate is not None else "")
            + (f" · mean reward {mean:.3f}" if mean is not None else "")
            + (
                f" (graded only {graded_mean:.3f})"
                if graded_mean is not None and success["graded"] < counts["done"]
                else ""
            )
            + (f" · retries {counts['retries']}" if counts["retries"] else "")
        )
        rows.append(Text(line, style="dim"))
        return Group(*rows)


def make_display(choice: DisplayName | None, console: Console, *, as_json: bool) -> RunEvents:
    """The display for ``--display``.

    None picks rich on a terminal, plain otherwise, and none with ``--json``.
    """
    if choice is None:
        choice = "none" if as_json else "rich" if console.is_terminal else "plain"
    if choice == "rich":
        return RichDisplay(console)
    if choice == "plain":
        return PlainDisplay(console)
    return QuietDisplay(console)


__all__ = ["DisplayName", "PlainDisplay", "QuietDisplay", "RichDisplay", "make_display"]
