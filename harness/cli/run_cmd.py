"""``harness run``: options → a config → :func:`harness.run` / :func:`harness.resume` → display."""

from __future__ import annotations

import json
import os
import signal
import sys
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.text import Text

from harness.api import resume as resume_run
from harness.api import run as start_run
from harness.cli.display import err, out, print_summary
from harness.cli.progress import DisplayName, make_display
from harness.config import resolve_config, resume_config
from harness.config.judges import parse_judge_option
from harness.errors import EXIT_INTERRUPTED, UsageError
from harness.runner import RunOutcome

DISPLAYS: tuple[DisplayName, ...] = ("rich", "plain", "none")


def _given(value: Any) -> bool:
    """Whether an option was given (None, and an empty repeatable option, were not)."""
    return value not in (None, [])


def _absolute(paths: list[Path] | None) -> list[str] | None:
    return [os.path.abspath(p) for p in paths] if paths else None


def _absolute_one(path: Path | None) -> str | None:
    return os.path.abspath(path) if path is not None else None


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


def run_options(values: dict[str, Any]) -> dict[str, Any]:
    """The config options among the values of :func:`run`'s parameters (those given).

    ``harness trials`` and ``harness experiment`` take the same options and use this too.

    Raises:
        ConfigError: A ``--judge`` value is not a table.
    """
    output_dir = values.get("output_dir")
    judges = [parse_judge_option(text) for text in values.get("judge") or []]
    return config_options(
        tasks__paths=_absolute(values.get("paths")),
        tasks__num_tasks=values.get("num_tasks"),
        tasks__shuffle=values.get("shuffle"),
        tasks__seed=values.get("seed"),
        tasks__names=values.get("task_name"),
        tasks__exclude=values.get("exclude"),
        tasks__categories=values.get("category"),
        tasks__skip_invalid=values.get("skip_invalid"),
        tasks__env_allow=values.get("task_env"),
        tasks__datasets__names=values.get("dataset"),
        tasks__datasets__tasks=values.get("task"),
        tasks__datasets__registry_path=_absolute_one(values.get("registry_path")),
        tasks__datasets__registry_url=values.get("registry_url"),
        tasks__datasets__repo=values.get("repo"),
        tasks__datasets__from_lock=_absolute_one(values.get("from_lock")),
        tasks__datasets__hub_url=values.get("hub_url"),
        agent__name=values.get("agent"),
        agent__cmd=values.get("agent_cmd"),
        agent__kwargs__max_turns=values.get("max_turns"),
        sandbox__backend=values.get("sandbox"),
        sandbox__runtime=values.get("runtime"),
        sandbox__agent_root=values.get("agent_root"),
        sandbox__agent_services=values.get("agent_services"),
        sandbox__cpu_policy=values.get("cpus"),
        sandbox__memory_policy=values.get("memory"),
        sandbox__base_aliases=values.get("base_alias"),
        sandbox__pull=values.get("pull"),
        sandbox__force_build=values.get("force_build"),
        env__id=values.get("env"),
        executor__name=values.get("executor"),
        executor__ray_address=values.get("ray_address"),
        retry__max_retries=values.get("max_retries"),
        model=values.get("model"),
        models=_absolute(values.get("models")),
        rollouts=values.get("rollouts"),
        concurrency=values.get("concurrency"),
        agent_concurrency=values.get("agent_concurrency"),
        output_dir=os.path.abspath(output_dir) if output_dir is not None else None,
        run_name=values.get("run_name"),
        fail_under=values.get("fail_under"),
        fail_on_tampering=values.get("fail_on_tampering"),
        evidence=values.get("evidence"),
        network=values.get("network"),
        judges=judges or None,
    )


def run(
    paths: Annotated[
        list[Path] | None,
        # Help is rich markup: an unescaped [tasks] would be taken for a style and vanish.
        typer.Argument(help="Task dirs or task-set folders (or \\[tasks] paths in the config)."),
    ] = None,
    config_file: Annotated[
        Path | None,
        typer.Option(
            "--config", "-c", help="TOML config file (its sections, or a run's config.toml)."
        ),
    ] = None,
    dataset: Annotated[
        list[str] | None,
        typer.Option(
            "--dataset",
            "-d",
            help="A dataset: ORG/NAME\\[@REF] on Harbor Hub, or a registry's NAME\\[@VERSION] "
            "(repeatable; docs/datasets.md).",
        ),
    ] = None,
    task: Annotated[
        list[str] | None,
        typer.Option(
            "--task",
            "-t",
            help="One task: ORG/NAME\\[@REF] on Harbor Hub, or a registry's TASK or "
            "DATASET@VERSION/TASK (repeatable).",
        ),
    ] = None,
    hub_url: Annotated[
        str | None,
        typer.Option(
            "--hub-url", help="The Harbor Hub to read (default: $HARNESS_HUB_URL, else Harbor's)."
        ),
    ] = None,
    registry_path: Annotated[
        Path | None, typer.Option("--registry-path", help="A local registry.json.")
    ] = None,
    registry_url: Annotated[
        str | None,
        typer.Option(
            "--registry-url",
            help="A registry.json URL (default: $HARNESS_REGISTRY_URL, else Harbor's).",
        ),
    ] = None,
    repo: Annotated[
        str | None,
        typer.Option(
            "--repo",
            help="A git repository of task dirs: OWNER/NAME or OWNER/NAME@REF, a URL or a path.",
        ),
    ] = None,
    from_lock: Annotated[
        Path | None,
        typer.Option(
            "--from-lock", help="Rerun exactly the dataset tasks of RUN_DIR's datasets.lock.json."
        ),
    ] = None,
    set_items: Annotated[
        list[str] | None,
        typer.Option(
            "--set",
            help="KEY=VALUE over the config; dotted keys, TOML values (e.g. --set "
            "retry.max_retries=3, --set agent.kwargs.max_turns=5). Repeatable, applied last.",
        ),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(
            "--resume",
            help="Continue RUN_DIR with its saved config: keep finished trials, rerun "
            "environment errors, cancelled and missing ones.",
        ),
    ] = None,
    rerun_status: Annotated[
        list[str] | None,
        typer.Option(
            "--rerun-status",
            help="With --resume: also rerun trials with this status (agent_error, "
            "agent_timeout, verifier_error). Repeatable.",
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            "-a",
            help="An installed agent (oracle, nop, command, builtin; `harness agents list`) "
            "or python:MODULE:CLASS.",
        ),
    ] = None,
    env: Annotated[
        str | None,
        typer.Option(
            "--env",
            help="The episode env (single, best-of-n, user-sim, judge; `harness.envs` plug-ins) "
            "or python:MODULE:CLASS; its parameters with --set env.KEY=VALUE.",
        ),
    ] = None,
    agent_cmd: Annotated[
        str | None,
        typer.Option(
            "--agent-cmd",
            help="Command for --agent command; {instruction_file} and {workspace} are filled "
            "in, and the instruction is also on stdin.",
        ),
    ] = None,
    model: Annotated[str | None, typer.Option("--model", help="Model for the agent.")] = None,
    models: Annotated[
        list[Path] | None,
        typer.Option("--models", help="Extra model catalog file (repeatable; later ones win)."),
    ] = None,
    max_turns: Annotated[
        int | None,
        typer.Option("--max-turns", help="Model calls the builtin agent may make per trial."),
    ] = None,
    sandbox: Annotated[
        str | None,
        typer.Option(
            "--sandbox", help="An installed backend (local, docker; `harness sandbox list`)."
        ),
    ] = None,
    runtime: Annotated[
        str | None,
        typer.Option("--runtime", help="Container runtime for --sandbox docker (e.g. runsc)."),
    ] = None,
    agent_root: Annotated[
        str | None,
        typer.Option(
            "--agent-root",
            help="never (default): the agent is an unprivileged uid; isolated: the task's "
            "or image's user, root included, under --runtime runsc or a userns-remapped "
            "engine only; allow: that user on any runtime, as Harbor does.",
        ),
    ] = None,
    agent_services: Annotated[
        str | None,
        typer.Option(
            "--agent-services",
            help="kill (default): every process the agent started dies before the tests; "
            "keep: those holding a listening socket keep serving the tests (docker, "
            "--agent-root never), and the record lists them.",
        ),
    ] = None,
    cpus: Annotated[
        str | None,
        typer.Option(
            "--cpus",
            help="How a task's cpus applies: limit (default, a cap), request (a weight "
            "only), guarantee (both) or ignore; the record says what held.",
        ),
    ] = None,
    memory: Annotated[
        str | None,
        typer.Option(
            "--memory",
            help="How a task's memory_mb applies: limit (default, a cap), request (a "
            "reservation only: no cap), guarantee (both) or ignore; the record says what held.",
        ),
    ] = None,
    base_alias: Annotated[
        list[str] | None,
        typer.Option(
            "--base-alias",
            help="FROM=LOCAL: rewrite a Dockerfile FROM image at build time, and a task's "
            "docker_image (repeatable).",
        ),
    ] = None,
    pull: Annotated[
        str | None,
        typer.Option(
            "--pull",
            help="When to pull a task's docker_image: missing (default), always or never.",
        ),
    ] = None,
    force_build: Annotated[
        bool | None,
        typer.Option(
            "--force-build/--no-force-build",
            help="Build a task's environment/Dockerfile even when it names a docker_image.",
        ),
    ] = None,
    skip_invalid: Annotated[
        bool | None,
        typer.Option(
            "--skip-invalid/--no-skip-invalid",
            help="Run the valid tasks of a set and list the invalid ones (default: refuse).",
        ),
    ] = None,
    task_env: Annotated[
        list[str] | None,
        typer.Option(
            "--task-env",
            metavar="VAR",
            help="Let tasks' ${VAR} templates read the host variable VAR (repeatable; "
            "tasks.env_allow). Others take their :-default. Provider keys stay refused.",
        ),
    ] = None,
    executor: Annotated[
        str | None,
        typer.Option(
            "--executor",
            # \\[ray]: rich markup would swallow the extra's name (pyproject's `ray` extra).
            help="Where trials run: local (this process, the default) or ray (a Ray task per "
            "trial; `pip install 'harness\\[ray]'`).",
        ),
    ] = None,
    ray_address: Annotated[
        str | None,
        typer.Option(
            "--ray-address",
            help="Ray cluster for --executor ray: HOST:PORT of its head, or auto (default: a "
            "private one-node cluster).",
        ),
    ] = None,
    rollouts: Annotated[
        int | None, typer.Option("--rollouts", "-r", help="Trials per task.")
    ] = None,
    concurrency: Annotated[
        int | None, typer.Option("--concurrency", "-j", help="Trials running at once.")
    ] = None,
    agent_concurrency: Annotated[
        int | None,
        typer.Option("--agent-concurrency", help="Agent phases running at once across all trials."),
    ] = None,
    max_retries: Annotated[
        int | None,
        typer.Option("--max-retries", help="Retries of a trial that fails retryably."),
    ] = None,
    num_tasks: Annotated[
        int | None, typer.Option("--num-tasks", "-n", help="Run only the first N tasks.")
    ] = None,
    shuffle: Annotated[
        bool | None, typer.Option("--shuffle/--no-shuffle", help="Shuffle tasks (seeded).")
    ] = None,
    seed: Annotated[int | None, typer.Option("--seed", help="Seed for --shuffle.")] = None,
    task_name: Annotated[
        list[str] | None,
        typer.Option("--task-name", help="Only tasks whose name or key matches GLOB (repeatable)."),
    ] = None,
    exclude: Annotated[
        list[str] | None,
        typer.Option("--exclude", help="Leave out tasks whose name or key matches GLOB."),
    ] = None,
    category: Annotated[
        list[str] | None,
        typer.Option("--category", help="Only tasks whose metadata category is NAME (repeatable)."),
    ] = None,
    output_dir: Annotated[
        Path | None, typer.Option("--output-dir", "-o", help="Where run dirs are created.")
    ] = None,
    run_name: Annotated[
        str | None,
        typer.Option("--run-name", help="Name of the run dir (default: generated)."),
    ] = None,
    fail_under: Annotated[
        float | None,
        typer.Option("--fail-under", help="Exit 1 when the mean reward is below this."),
    ] = None,
    fail_on_tampering: Annotated[
        bool | None,
        typer.Option(
            "--fail-on-tampering/--no-fail-on-tampering",
            help="Exit 1 when any verdict was taken after the agent tampered with what its "
            "verifier runs (a root agent and a shared verifier).",
        ),
    ] = None,
    evidence: Annotated[
        str | None,
        typer.Option(
            "--evidence",
            help="How the final workspace is kept: diff (default: a manifest, changed files "
            "once per run), full (a full copy) or none (the manifest only).",
        ),
    ] = None,
    network: Annotated[
        str | None,
        typer.Option(
            "--network",
            help="task (default: each phase gets its task's network policy) or none (no "
            "agent phase reaches the internet, whatever the task says; verifiers keep "
            "theirs). docs/tasks.md.",
        ),
    ] = None,
    judge: Annotated[
        list[str] | None,
        typer.Option(
            "--judge",
            help="A judge for every trial, as a TOML inline table or JSON object, e.g. "
            '\'{type = "tool-call", tool = "write"}\' (docs/judges.md). Repeatable.',
        ),
    ] = None,
    display: Annotated[
        str | None,
        typer.Option(
            "--display",
            help="rich (live view), plain (one line per trial) or none; default: rich on a "
            "terminal, plain otherwise, none with --json.",
        ),
    ] = None,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the summary as JSON on stdout.")
    ] = False,
) -> None:
    """Run an agent on tasks and grade every trial (or --resume an earlier run)."""
    options = run_options(locals())  # every parameter, as given
    events = make_display(check_display(display), err, as_json=as_json)
    sets = set_items or []
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
