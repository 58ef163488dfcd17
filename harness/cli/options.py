"""The options of ``harness run``, ``trials`` and ``experiment``, each declared once.

:data:`OPTIONS` is the one table of them: each row names the option's flags, its type, its
one-line help, the ``--help`` panel it is shown in, the commands that take it and, for a
run option, the config key it sets. Everything else is made from that table:

- each command's parameters (:func:`takes_options` gives the command function the
  signature typer reads);
- the config layer of the options given (:func:`run_options`);
- the option table of docs/configuration.md (:func:`options_markdown`; a unit test fails
  when the page and the table differ).

:data:`CONFIG_ONLY` lists the config keys that deliberately have no flag (a config file or
``--set`` sets them); a unit test checks that every config key is either the key of an
option or listed there, and that every option's key is a real config key.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Final, Literal, TypeVar

import typer

from harness.config.judges import parse_judge_option
from harness.experiments.trials import SUMMARY_FILENAME

Command = Literal["run", "trials", "experiment"]
#: The commands whose options this table declares.
COMMANDS: Final[tuple[Command, ...]] = ("run", "trials", "experiment")
_RUNS: Final[tuple[Command, ...]] = ("run", "trials")

#: The ``--help`` panels, in the order ``--help`` shows them. "Options" is typer's own
#: panel, where ``--help`` goes too. Arguments stay in typer's "Arguments" panel.
GENERAL = "Options"
TASKS = "Tasks"
SELECTION = "Task selection"
AGENT = "Agent and model"
SANDBOX = "Sandbox"
IMAGES = "Images"
SCALE = "Scale and retries"
RESULTS = "Results"
EXIT = "Exit code"
PANELS: Final[tuple[str, ...]] = (
    GENERAL,
    TASKS,
    SELECTION,
    AGENT,
    SANDBOX,
    IMAGES,
    SCALE,
    RESULTS,
    EXIT,
)

REQUIRED: Final = inspect.Parameter.empty
"""The default of an argument that must be given."""


@dataclass(frozen=True)
class Option:
    """One command-line option (or argument) of the run commands.

    Attributes:
        name: The parameter's name: what the command function receives it as.
        flags: Its flags (``"--agent", "-a"``; a switch ``"--shuffle/--no-shuffle"``);
            empty for a positional argument.
        kind: Its type as typer parses it (``str``, ``int``, ``float``, ``bool``, ``Path``,
            ``list[str]``, ``list[Path]``). A given ``Path`` is made absolute against the
            working directory before it reaches the config.
        help: One line for ``--help``.
        panel: The ``--help`` panel (one of :data:`PANELS`).
        key: The dotted config key it sets (``sandbox.agent_root``); None for an option of
            the command itself.
        commands: The commands that take it.
        metavar: What ``--help`` shows for its value (default: typer's type name).
        default: Its value when not given (:data:`REQUIRED`: it must be given).
        helps: A command where it means something narrower → that command's help line.
        doc: Its longer description in docs/configuration.md (default: :attr:`help`).
        item: Applied to each given value before it reaches the config.
    """

    name: str
    flags: tuple[str, ...]
    kind: Any
    help: str
    panel: str
    key: str | None = None
    commands: tuple[Command, ...] = _RUNS
    metavar: str | None = None
    default: Any = None
    helps: Mapping[str, str] = field(default_factory=dict)
    doc: str | None = None
    item: Callable[[Any], Any] | None = None

    def help_for(self, command: Command) -> str:
        """The help line ``command`` shows."""
        return self.helps.get(command, self.help)

    @property
    def is_argument(self) -> bool:
        """Whether it is positional."""
        return not self.flags

    def parameter(self, command: Command) -> inspect.Parameter:
        """The parameter of ``command``'s signature that typer builds the option from."""
        info: Any
        if self.is_argument:
            info = typer.Argument(help=self.help_for(command), metavar=self.metavar)
        else:
            info = typer.Option(
                *self.flags,
                help=self.help_for(command),
                # A switch takes no value: no type column (it would only say <bool>).
                metavar="" if self.kind is bool else self.metavar,
                rich_help_panel=self.panel,
            )
        annotation = self.kind | None if self.default is None else self.kind
        return inspect.Parameter(
            self.name,
            inspect.Parameter.POSITIONAL_OR_KEYWORD,
            annotation=Annotated[annotation, info],
            default=self.default,
        )


OPTIONS: Final[tuple[Option, ...]] = (
    # --- The command's own options ----------------------------------------------------------
    Option(
        "n",
        (),
        int,
        "How many runs (1-50).",
        GENERAL,
        commands=("trials",),
        metavar="N",
        default=REQUIRED,
    ),
    Option(
        "paths",
        (),
        list[Path],
        # Help is rich markup: an unescaped [tasks] would be taken for a style and vanish.
        "Task dirs or task-set folders (or \\[tasks] paths in the config).",
        TASKS,
        key="tasks.paths",
    ),
    Option(
        "config_file",
        ("--config", "-c"),
        Path,
        "TOML config file (or a run's config.toml).",
        GENERAL,
        commands=COMMANDS,
        metavar="FILE",
        helps={"experiment": "The experiment file (experiment.toml)."},
        doc="A TOML config file: its keys and sections, or a run dir's config.toml.",
    ),
    Option(
        "set_items",
        ("--set",),
        list[str],
        "KEY=VALUE over the config (a TOML value).",
        GENERAL,
        commands=COMMANDS,
        metavar="KEY=VAL",
        helps={"experiment": "KEY=VALUE over every arm's run config."},
        doc="KEY=VALUE over the config: a dotted key and a TOML value (`--set "
        "retry.max_retries=3`, `--set agent.kwargs.max_turns=5`); repeatable, applied last.",
    ),
    Option(
        "resume",
        ("--resume",),
        Path,
        "Continue RUN_DIR's unfinished trials.",
        GENERAL,
        commands=("run",),
        metavar="RUN_DIR",
        doc="Continue RUN_DIR with its saved config: keep finished trials, rerun environment "
        "errors, cancelled and missing ones.",
    ),
    Option(
        "rerun_status",
        ("--rerun-status",),
        list[str],
        "With --resume: rerun this status too.",
        GENERAL,
        commands=("run",),
        metavar="STATUS",
        doc="With `--resume`: also rerun trials with this status (`agent_error`, "
        "`agent_timeout`, `verifier_error`); repeatable.",
    ),
    Option(
        "retry_failed",
        ("--retry-failed",),
        Path,
        "Rerun once each failed trial of this summary or dir.",
        GENERAL,
        commands=("trials",),
        metavar="PATH",
        doc="Rerun each failed trial of this trials_summary.json (or of the runs below this "
        "dir) once, into a new run; exit 3 when there is none.",
    ),
    Option(
        "runs_per_variant",
        ("--runs-per-variant",),
        int,
        "Repetitions of every arm (over the file).",
        GENERAL,
        commands=("experiment",),
        metavar="N",
    ),
    Option(
        "out_dir",
        ("--out-dir",),
        Path,
        "Where the runs go (default: a new dir in --output-dir).",
        GENERAL,
        commands=("trials", "experiment"),
        metavar="DIR",
        helps={"experiment": "The experiment dir (default: a new one under runs/)."},
        doc="Where the runs go (trial-001, ...); default: a new dir under `--output-dir`.",
    ),
    Option(
        "summary_out",
        ("--summary-out",),
        Path,
        f"Summary file (default: <out-dir>/{SUMMARY_FILENAME}).",
        GENERAL,
        commands=("trials",),
        metavar="FILE",
        doc=f"Where the summary goes (default: `<out-dir>/{SUMMARY_FILENAME}`).",
    ),
    Option(
        "report",
        ("--report",),
        Path,
        "Only (re)make the report of this experiment dir.",
        GENERAL,
        commands=("experiment",),
        metavar="DIR",
        doc="Only (re)make the report of this experiment dir from its runs (e.g. after "
        "`harness run --resume` of an arm).",
    ),
    Option(
        "display",
        ("--display",),
        str,
        "rich (default on a terminal), plain or none.",
        GENERAL,
        commands=COMMANDS,
        metavar="MODE",
        doc="`rich` (live view), `plain` (one line per trial) or `none`; default: rich on a "
        "terminal, plain otherwise, none with `--json`.",
    ),
    Option(
        "as_json",
        ("--json",),
        bool,
        "Print the summary as JSON on stdout.",
        GENERAL,
        commands=COMMANDS,
        default=False,
        helps={"experiment": "Print the report as JSON on stdout."},
    ),
    # --- Tasks ------------------------------------------------------------------------------
    Option(
        "dataset",
        ("--dataset", "-d"),
        list[str],
        "ORG/NAME\\[@REF] (Hub) or NAME\\[@VERSION].",
        TASKS,
        key="tasks.datasets.names",
        metavar="NAME",
        doc="A dataset: `ORG/NAME[@REF]` on Harbor Hub, or a registry's `NAME[@VERSION]`; "
        "repeatable (datasets.md).",
    ),
    Option(
        "task",
        ("--task", "-t"),
        list[str],
        "One task: ORG/NAME\\[@REF], or a registry's.",
        TASKS,
        key="tasks.datasets.tasks",
        metavar="NAME",
        doc="One task: `ORG/NAME[@REF]` on Harbor Hub, or a registry's `TASK` or "
        "`DATASET@VERSION/TASK`; repeatable.",
    ),
    Option(
        "repo",
        ("--repo",),
        str,
        "Git repo of task dirs: OWNER/NAME\\[@REF], URL, path.",
        TASKS,
        key="tasks.datasets.repo",
        metavar="REPO",
        doc="A git repository of task dirs: `OWNER/NAME` or `OWNER/NAME@REF`, a URL or a path.",
    ),
    Option(
        "from_lock",
        ("--from-lock",),
        Path,
        "Rerun the tasks of RUN_DIR's dataset lock.",
        TASKS,
        key="tasks.datasets.from_lock",
        metavar="RUN_DIR",
        doc="Rerun exactly the dataset tasks of RUN_DIR's `datasets.lock.json`.",
    ),
    Option(
        "registry_path",
        ("--registry-path",),
        Path,
        "A local registry.json.",
        TASKS,
        key="tasks.datasets.registry_path",
        metavar="FILE",
    ),
    Option(
        "registry_url",
        ("--registry-url",),
        str,
        "A registry.json URL (default: $HARNESS_REGISTRY_URL).",
        TASKS,
        key="tasks.datasets.registry_url",
        metavar="URL",
        doc="A registry.json URL (default: `$HARNESS_REGISTRY_URL`, else Harbor's).",
    ),
    Option(
        "hub_url",
        ("--hub-url",),
        str,
        "The Harbor Hub to read (default: $HARNESS_HUB_URL).",
        TASKS,
        key="tasks.datasets.hub_url",
        metavar="URL",
        doc="The Harbor Hub to read (default: `$HARNESS_HUB_URL`, else Harbor's).",
    ),
    Option(
        "task_env",
        ("--task-env",),
        list[str],
        "Host VAR that tasks' ${VAR} may read.",
        TASKS,
        key="tasks.env_allow",
        metavar="VAR",
        doc="Let tasks' `${VAR}` templates read the host variable VAR (repeatable); others "
        "take their `:-default`. Provider keys stay refused.",
    ),
    Option(
        "task_name",
        ("--task-name",),
        list[str],
        "Only tasks whose name or key matches.",
        SELECTION,
        key="tasks.names",
        metavar="GLOB",
        doc="Only tasks whose name or key matches GLOB; repeatable.",
    ),
    Option(
        "exclude",
        ("--exclude",),
        list[str],
        "Leave out tasks whose name or key matches.",
        SELECTION,
        key="tasks.exclude",
        metavar="GLOB",
    ),
    Option(
        "category",
        ("--category",),
        list[str],
        "Only tasks of this metadata category.",
        SELECTION,
        key="tasks.categories",
        metavar="NAME",
        doc="Only tasks whose `[metadata].category` is NAME; repeatable.",
    ),
    Option(
        "num_tasks",
        ("--num-tasks", "-n"),
        int,
        "Run only the first N tasks.",
        SELECTION,
        key="tasks.num_tasks",
        metavar="N",
    ),
    Option(
        "shuffle",
        ("--shuffle/--no-shuffle",),
        bool,
        "Shuffle tasks (seeded).",
        SELECTION,
        key="tasks.shuffle",
    ),
    Option(
        "seed", ("--seed",), int, "Seed for --shuffle.", SELECTION, key="tasks.seed", metavar="N"
    ),
    Option(
        "skip_invalid",
        ("--skip-invalid/--no-skip-invalid",),
        bool,
        "Run a set's valid tasks, list the others (default: refuse).",
        SELECTION,
        key="tasks.skip_invalid",
        doc="Run the valid tasks of a set and list the invalid ones (default: refuse the set).",
    ),
    # --- Agent and model --------------------------------------------------------------------
    Option(
        "agent",
        ("--agent", "-a"),
        str,
        "An installed agent (`harness agents list`) or python:MODULE:CLASS.",
        AGENT,
        key="agent.name",
        metavar="NAME",
        doc="An installed agent (`oracle`, `nop`, `command`, `builtin`...; `harness agents "
        "list`) or `python:MODULE:CLASS`.",
    ),
    Option(
        "agent_cmd",
        ("--agent-cmd",),
        str,
        "Command line of --agent command.",
        AGENT,
        key="agent.cmd",
        metavar="CMD",
        doc="Command for `--agent command`; `{instruction_file}` and `{workspace}` are "
        "filled in, and the instruction is also on stdin.",
    ),
    Option("model", ("--model",), str, "Model for the agent.", AGENT, key="model", metavar="NAME"),
    Option(
        "models",
        ("--models",),
        list[Path],
        "An extra model catalog file (later ones win).",
        AGENT,
        key="models",
        metavar="FILE",
        doc="An extra model catalog file; repeatable, later ones win.",
    ),
    Option(
        "max_turns",
        ("--max-turns",),
        int,
        "Model calls of the builtin agent per trial.",
        AGENT,
        key="agent.kwargs.max_turns",
        metavar="N",
    ),
    Option(
        "env",
        ("--env",),
        str,
        "The episode env (single, best-of-n...) or python:MODULE:CLASS.",
        AGENT,
        key="env.id",
        metavar="NAME",
        doc="The episode env (`single`, `best-of-n`, `user-sim`, `judge`; `harness.envs` "
        "plug-ins) or `python:MODULE:CLASS`; its parameters with `--set env.KEY=VALUE`.",
    ),
    # --- Sandbox ----------------------------------------------------------------------------
    Option(
        "sandbox",
        ("--sandbox",),
        str,
        "An installed backend: local, docker (`harness sandbox list`).",
        SANDBOX,
        key="sandbox.backend",
        metavar="NAME",
        doc="An installed backend (`local`, `docker`; `harness sandbox list`).",
    ),
    Option(
        "runtime",
        ("--runtime",),
        str,
        "Runtime for --sandbox docker (e.g. runsc).",
        SANDBOX,
        key="sandbox.runtime",
        metavar="NAME",
    ),
    Option(
        "agent_root",
        ("--agent-root",),
        str,
        "Root agent: never (default), isolated or allow.",
        SANDBOX,
        key="sandbox.agent_root",
        metavar="MODE",
        doc="`never` (default): the agent is an unprivileged uid; `isolated`: the task's or "
        "image's user, root included, under `--runtime runsc` or a userns-remapped engine "
        "only; `allow`: that user on any runtime, as Harbor does.",
    ),
    Option(
        "agent_services",
        ("--agent-services",),
        str,
        "kill (default) or keep the agent's servers for the tests.",
        SANDBOX,
        key="sandbox.agent_services",
        metavar="MODE",
        doc="`kill` (default): every process the agent started dies before the tests; "
        "`keep`: those holding a listening socket keep serving the tests (docker; a root "
        "agent's in a Landlock domain, runc only), and the record lists them.",
    ),
    Option(
        "cpus",
        ("--cpus",),
        str,
        "A task's cpus: limit (default), request, guarantee, ignore.",
        SANDBOX,
        key="sandbox.cpu_policy",
        metavar="POLICY",
        doc="How a task's `cpus` applies: `limit` (default, a cap), `request` (a weight "
        "only), `guarantee` (both) or `ignore`; the record says what held.",
    ),
    Option(
        "memory",
        ("--memory",),
        str,
        "A task's memory_mb: limit (default), request, guarantee, ignore.",
        SANDBOX,
        key="sandbox.memory_policy",
        metavar="POLICY",
        doc="How a task's `memory_mb` applies: `limit` (default, a cap), `request` (a "
        "reservation only: no cap), `guarantee` (both) or `ignore`; the record says what held.",
    ),
    Option(
        "network",
        ("--network",),
        str,
        "task (default) or none: no agent phase gets the internet.",
        SANDBOX,
        key="network",
        metavar="MODE",
        doc="`task` (default: each phase gets its task's network policy) or `none` (no agent "
        "phase reaches the internet, whatever the task says; verifiers keep theirs; tasks.md).",
    ),
    Option(
        "base_alias",
        ("--base-alias",),
        list[str],
        "Rewrite a FROM image (and docker_image).",
        IMAGES,
        key="sandbox.base_aliases",
        metavar="FROM=LOCAL",
        doc="`FROM=LOCAL`: rewrite a Dockerfile FROM image at build time, and a task's "
        "`docker_image`; repeatable.",
    ),
    Option(
        "pull",
        ("--pull",),
        str,
        "Pull docker_image: missing (default), always, never.",
        IMAGES,
        key="sandbox.pull",
        metavar="WHEN",
        doc="When to pull a task's `docker_image`: `missing` (default), `always` or `never`.",
    ),
    Option(
        "force_build",
        ("--force-build/--no-force-build",),
        bool,
        "Build the Dockerfile even with a docker_image.",
        IMAGES,
        key="sandbox.force_build",
        doc="Build a task's `environment/Dockerfile` even when it names a `docker_image`.",
    ),
    # --- Scale and retries ------------------------------------------------------------------
    Option(
        "rollouts",
        ("--rollouts", "-r"),
        int,
        "Trials per task.",
        SCALE,
        key="rollouts",
        metavar="N",
    ),
    Option(
        "concurrency",
        ("--concurrency", "-j"),
        int,
        "Trials running at once.",
        SCALE,
        key="concurrency",
        metavar="N",
    ),
    Option(
        "agent_concurrency",
        ("--agent-concurrency",),
        int,
        "Agent phases at once across all trials.",
        SCALE,
        key="agent_concurrency",
        metavar="N",
        doc="Agent phases at once across all trials.",
    ),
    Option(
        "max_retries",
        ("--max-retries",),
        int,
        "Retries of a trial that fails retryably.",
        SCALE,
        key="retry.max_retries",
        metavar="N",
    ),
    Option(
        "executor",
        ("--executor",),
        str,
        # \\[ray]: rich markup would swallow the extra's name (pyproject's `ray` extra).
        "local (default) or ray (`harness\\[ray]`).",
        SCALE,
        key="executor.name",
        metavar="NAME",
        doc="Where trials run: `local` (this process, the default) or `ray` (a Ray task per "
        "trial; `pip install 'harness[ray]'`).",
    ),
    Option(
        "ray_address",
        ("--ray-address",),
        str,
        "Ray head HOST:PORT or auto (default: a private cluster).",
        SCALE,
        key="executor.ray_address",
        metavar="ADDR",
        doc="The Ray cluster for `--executor ray`: HOST:PORT of its head, or `auto` "
        "(default: a private one-node cluster).",
    ),
    # --- Results ----------------------------------------------------------------------------
    Option(
        "output_dir",
        ("--output-dir", "-o"),
        Path,
        "Where run dirs are created.",
        RESULTS,
        key="output_dir",
        metavar="DIR",
    ),
    Option(
        "run_name",
        ("--run-name",),
        str,
        "Name of the run dir (default: generated).",
        RESULTS,
        key="run_name",
        commands=("run",),
        metavar="NAME",
    ),
    Option(
        "evidence",
        ("--evidence",),
        str,
        "The final workspace kept: diff (default), full or none.",
        RESULTS,
        key="evidence",
        metavar="MODE",
        doc="How the final workspace is kept: `diff` (default: a manifest, changed files once "
        "per run), `full` (a full copy) or `none` (the manifest only).",
    ),
    Option(
        "judge",
        ("--judge",),
        list[str],
        "A judge for every trial: a TOML inline table or JSON.",
        RESULTS,
        key="judges",
        metavar="TABLE",
        doc="A judge for every trial, as a TOML inline table or JSON object, e.g. "
        '`\'{type = "tool-call", tool = "write"}\'` (judges.md); repeatable.',
        item=parse_judge_option,
    ),
    Option(
        "fail_under",
        ("--fail-under",),
        float,
        "Exit 1 when the mean reward is below this.",
        EXIT,
        key="fail_under",
        metavar="X",
    ),
    Option(
        "fail_on_tampering",
        ("--fail-on-tampering/--no-fail-on-tampering",),
        bool,
        "Exit 1 on a verdict taken after tampering.",
        EXIT,
        key="fail_on_tampering",
        doc="Exit 1 when any verdict was taken after the agent tampered with what its "
        "verifier runs (a root agent and a shared verifier).",
    ),
)
"""Every option of ``harness run``, ``trials`` and ``experiment``, in ``--help``'s order."""

CONFIG_ONLY: Final[tuple[str, ...]] = (
    "agent.kwargs",
    "agent.version",
    "budget",
    "env",
    "evidence_caps",
    "executor.kwargs",
    "gateway",
    "retry",
    "sandbox.builder",
    "sandbox.compose_host_access",
    "sandbox.expose",
    "sandbox.gid",
    "sandbox.kwargs",
    "sandbox.local_limits",
    "sandbox.require_limits",
    "sandbox.uid",
    "tasks.trial_ids",
    "threshold",
)
"""Config keys (or whole sections) without a flag: a config file or ``--set`` sets them.

A section listed here may still hold keys that have a flag (``retry.max_retries``)."""


def options_of(command: Command) -> list[Option]:
    """The options ``command`` takes, in ``--help``'s order."""
    return [option for option in OPTIONS if command in option.commands]


def signature(command: Command) -> inspect.Signature:
    """The signature typer reads ``command``'s parameters from: arguments first."""
    taken = options_of(command)
    ordered = [o for o in taken if o.is_argument] + [o for o in taken if not o.is_argument]
    return inspect.Signature([option.parameter(command) for option in ordered])


_Func = TypeVar("_Func", bound=Callable[..., None])


def takes_options(command: Command) -> Callable[[_Func], _Func]:
    """Give a command function (``def run(**values: Any)``) the parameters of ``command``."""

    def decorate(func: _Func) -> _Func:
        func.__signature__ = signature(command)  # type: ignore[attr-defined]
        return func

    return decorate


def _given(value: Any) -> bool:
    """Whether an option was given (None, and an empty repeatable option, were not)."""
    return value not in (None, [])


def _converted(option: Option, value: Any) -> Any:
    def one(item: Any) -> Any:
        if isinstance(item, Path):
            item = os.path.abspath(item)
        return option.item(item) if option.item is not None else item

    return [one(item) for item in value] if isinstance(value, list) else one(value)


def run_options(values: Mapping[str, Any]) -> dict[str, Any]:
    """The config layer of the options given: each at its key, paths made absolute.

    Args:
        values: A command's parameters by name (those not given are None or empty).

    Returns:
        The options given, placed in the config's sections.

    Raises:
        ConfigError: A ``--judge`` value is not a table.
    """
    layer: dict[str, Any] = {}
    for option in OPTIONS:
        value = values.get(option.name)
        if option.key is None or not _given(value):
            continue
        *sections, key = option.key.split(".")
        node = layer
        for section in sections:
            node = node.setdefault(section, {})
        node[key] = _converted(option, value)
    return layer


def _flags(option: Option) -> str:
    if option.is_argument:
        return option.metavar or option.name.upper()
    text = ", ".join(f"`{part}`" for flag in option.flags for part in flag.split("/"))
    if option.metavar is not None:
        text += f" {option.metavar}"
    return text


def options_markdown() -> str:
    """The option table of docs/configuration.md, made from :data:`OPTIONS`."""
    lines = []
    for panel in PANELS:
        lines += [
            "",
            f"**{panel}**",
            "",
            "| Option | Config key | Commands | Meaning |",
            "|---|---|---|---|",
        ]
        for option in OPTIONS:
            if option.panel != panel:
                continue
            key = f"`{option.key}`" if option.key else ""
            text = (option.doc or option.help).replace("\\[", "[").replace("|", "\\|")
            commands = ", ".join(option.commands)
            lines.append(f"| {_flags(option)} | {key} | {commands} | {text} |")
    return "\n".join(lines[1:]) + "\n"


__all__ = [
    "COMMANDS",
    "CONFIG_ONLY",
    "OPTIONS",
    "PANELS",
    "REQUIRED",
    "Option",
    "options_markdown",
    "options_of",
    "run_options",
    "signature",
    "takes_options",
]
