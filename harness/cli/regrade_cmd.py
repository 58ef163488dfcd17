"""``harness regrade``: the verifiers and judges again on a run's saved evidence."""

from __future__ import annotations

import json
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

from harness.api import load_run
from harness.cli.display import err, out, print_summary
from harness.cli.progress import make_display
from harness.cli.run_cmd import check_display, config_options
from harness.config.judges import judge_spec, parse_judge_option
from harness.experiments.regrade import RegradeOutcome, regrade, regrade_config

__all__ = ["regrade_cmd"]


def _reward(side: dict[str, Any] | None) -> str:
    if side is None:
        return "absent"
    reward = side.get("reward")
    return f"{side['status']} {'-' if reward is None else f'{reward:g}'}"


def _show(result: RegradeOutcome, *, as_json: bool) -> None:
    if as_json:
        data = {
            "run_dir": str(result.run.run_dir),
            "source": str(result.source),
            "changes": result.changes,
            "dataset_metric_changes": result.metrics,
            **result.run.summary.model_dump(mode="json"),
        }
        sys.stdout.write(json.dumps(data, indent=2) + "\n")
        return
    print_summary(out, result.run)
    changed = [c for c in result.changes if _reward(c["before"]) != _reward(c["after"])]
    out.print(
        f"regraded {len(result.changes)} trial(s) of {result.source}: {len(changed)} changed",
        markup=False,
    )
    for change in changed:
        note = " (task changed since)" if change["task_changed"] else ""
        out.print(
            f"  {change['trial_id']}: {_reward(change['before'])} -> {_reward(change['after'])}"
            f"{note}",
            markup=False,
        )
    for metric in result.metrics:  # names a run writes (checked), numbers or absent
        if metric["before"] != metric["after"]:
            out.print(
                f"  dataset metric {metric['metric']}: {_number(metric['before'])} -> "
                f"{_number(metric['after'])}",
                markup=False,
            )


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def regrade_cmd(
    run_dir: Annotated[Path, typer.Argument(help="The run dir whose evidence is regraded.")],
    judge: Annotated[
        list[str] | None,
        typer.Option(
            "--judge",
            help="A judge added to every trial (a TOML inline table or JSON object; it "
            "replaces a judge of the same name). Repeatable.",
        ),
    ] = None,
    sandbox: Annotated[
        str | None, typer.Option("--sandbox", help="Sandbox backend (default: the source's).")
    ] = None,
    runtime: Annotated[
        str | None, typer.Option("--runtime", help="Container runtime for --sandbox docker.")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-j", help="Trials graded at once.")
    ] = None,
    output_dir: Annotated[
        Path | None,
        typer.Option(
            "--output-dir", "-o", help="Where the new run dir goes (default: beside the source)."
        ),
    ] = None,
    run_name: Annotated[
        str | None,
        typer.Option(
            "--run-name", help="Name of the new run dir (default: regrade--<source>--<hex>)."
        ),
    ] = None,
    set_items: Annotated[
        list[str] | None, typer.Option("--set", help="KEY=VALUE over the config (as for run).")
    ] = None,
    display: Annotated[str | None, typer.Option("--display", help="rich, plain or none.")] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary and changes as JSON.")
    ] = False,
) -> None:
    """Grade a run's saved evidence again (tests and judges, in a sandbox), into a new run dir.

    No agent runs: each trial's saved workspace is put back into a fresh sandbox and graded.
    Exit codes as for `harness run`.
    """
    source = run_dir.absolute()
    options = config_options(
        sandbox__backend=sandbox,
        sandbox__runtime=runtime,
        concurrency=concurrency,
        output_dir=str(output_dir.absolute()) if output_dir is not None else str(source.parent),
        run_name=run_name,
    )
    judges = [judge_spec(parse_judge_option(text), f"--judge {text}") for text in judge or []]
    records = load_run(source).records
    config = regrade_config(source, records, judges=judges, options=options, sets=set_items or [])
    events = make_display(check_display(display), err, as_json=as_json)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # from here on, Ctrl-C is the run's to handle
    result = regrade(source, config, events=events)
    _show(result, as_json=as_json)
    raise typer.Exit(result.run.exit_code)
