"""``harness run``: options → a config → :func:`harness.run` / :func:`harness.resume` → display.

Its options are declared in :mod:`harness.cli.options`.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

import typer
from rich.text import Text

from harness.api import resume as resume_run
from harness.api import run as start_run
from harness.cli.display import err, out, print_summary
from harness.cli.options import run_options, takes_options
from harness.cli.progress import DisplayName, make_display
from harness.config import resolve_config, resume_config
from harness.errors import EXIT_INTERRUPTED, UsageError
from harness.runner import RunOutcome

DISPLAYS: tuple[DisplayName, ...] = ("rich", "plain", "none")


def _given(value: Any) -> bool:
    """Whether an option was given (None, and an empty repeatable option, were not)."""
    return value not in (None, [])


def config_options(**given: Any) -> dict[str, Any]:
    """The command-line options given, placed in the config's sections.

    Each keyword is ``section__key`` (``agent__name``) or a run-level key (``rollouts``).
    """
    options: dict[str, Any] = {}
    for name, value in given.items():
        if not _given(value):
            continue
        *sections, key = name.split("__")
        node = options
        for section in sections:
            node = node.setdefault(section, {})
        node[key] = value
    return options


def check_display(display: str | None) -> DisplayName | None:
    """``--display`` checked.

    Raises:
        UsageError: Not rich, plain or none.
    """
    for name in DISPLAYS:
        if display == name:
            return name
    if display is not None:
        raise UsageError(f"--display {display}: expected rich, plain or none")
    return None


@takes_options("run")
def run(**values: Any) -> None:
    """Run an agent on tasks and grade every trial (or --resume an earlier run)."""
    options = run_options(values)
    as_json: bool = values["as_json"]
    resume: Path | None = values["resume"]
    rerun_status: list[str] | None = values["rerun_status"]
    config_file: Path | None = values["config_file"]
    events = make_display(check_display(values["display"]), err, as_json=as_json)
    sets = values["set_items"] or []
    try:
        if resume is not None:
            config = resume_config(resume, file=config_file, options=options, sets=sets)
        else:
            if rerun_status:
                raise UsageError("--rerun-status applies to --resume only")
            config = resolve_config(file=config_file, options=options, sets=sets)
        # From here on Ctrl-C is the library's to handle: it stops a run being prepared, and
        # while trials run it stops them and cleans up (exit 130); any other (once the run
        # returns, while the summary prints) must not cut the run's last writes.
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if resume is not None:
            outcome = resume_run(resume, config=config, rerun=rerun_status or [], events=events)
        else:
            outcome = start_run(config, events=events)
    except KeyboardInterrupt:
        err.print("[yellow]interrupted before the run started; nothing was run[/yellow]")
        raise typer.Exit(EXIT_INTERRUPTED) from None
    _show(outcome, as_json=as_json)


def _show(outcome: RunOutcome, *, as_json: bool) -> None:
    """Print the outcome, then exit with its code."""
    if outcome.nothing_to_resume:
        err.print(
            f"nothing to resume: all {outcome.planned} trial(s) of {outcome.run_dir.name} are done"
        )
    if as_json:
        data = {"run_dir": str(outcome.run_dir), **outcome.summary.model_dump(mode="json")}
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
    else:
        print_summary(out, outcome)
    if outcome.stopped is not None:
        # The one message of a fault of the machine: what failed, the records, --resume.
        err.print(Text(outcome.stopped, style="yellow"))
    elif outcome.interrupted:
        err.print(f"interrupted; continue with: harness run --resume {outcome.run_dir}")
    if outcome.stragglers:
        # Trial threads still running after an abort: do not wait to join them.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(outcome.exit_code)
    raise typer.Exit(outcome.exit_code)
