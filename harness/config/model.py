"""The run config's sections: ``[agent]``, ``[sandbox]``, ``[executor]``, ``[tasks]``...

Every model is frozen and forbids unknown keys. :class:`RunConfig` also accepts the flat
keys of harness 0.1 (``agent = "nop"``, ``agent_cmd``, ``task_names``, ``sandbox_uid``...):
they are moved into their sections before validation (:mod:`harness.config.legacy`), so a
``config.toml`` written by any earlier version still loads and resumes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from harness.config.judges import JudgeSpec
from harness.config.legacy import sectioned
from harness.errors import AGENT_ERROR_CAUSES
from sandbox.inside.evidence import DEFAULT_LIMITS as _EVIDENCE_DEFAULTS
from sandbox.inside.evidence import Limits
from sandbox.options import SandboxConfig

#: Statuses a trial can end with; a retry rule may name any but these two.
_NEVER_RETRIED = ("completed", "cancelled")
_RUN_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
_SECTION = ConfigDict(extra="forbid", frozen=True)
#: The one line a config without tasks gets.
NO_TASKS = (
    "no tasks given; pass task dirs as arguments, -d NAME[@VERSION], --repo OWNER/NAME or "
    "--from-lock RUN_DIR, or set `paths` under [tasks] in the config"
)


class AgentConfig(BaseModel):
    """The agent under evaluation (``[agent]``; ``--agent``, ``--agent-cmd``).

    Attributes:
        name: An installed agent (``harness agents list``), or ``python:module:Class``
            for trusted Python code run in the harness.
        cmd: Command line of the ``command`` agent.
        kwargs: Options of the agent (e.g. ``max_turns`` for ``builtin``); each agent
            names the ones it takes.
        version: The version of an installed agent CLI (``claude-code``...) to fetch
            instead of its pinned default (docs/agents.md).
    """

    model_config = _SECTION

    name: str = "oracle"
    cmd: str | None = None
    kwargs: dict[str, Any] = Field(default_factory=dict)
    version: str | None = None


class EnvConfig(BaseModel):
    """The episode env (``[env]``, ``--env``; docs/episodes.md).

    Attributes:
        id: An installed env (``single``, ``best-of-n``, ``user-sim``, ``judge``, a
            plug-in of ``harness.envs``) or ``python:module:Class``.
        max_concurrent_agents: Agents of one episode running at once (None: no bound).
        timeout_sec: Deadline of the env's ``setup`` + ``run`` (None: none).
        finalize_timeout_sec: Deadline of its ``finalize``.
        roles: Role name → the agent playing it; a role left out plays the run's
            ``[agent]`` (its main role) or the env's default.

    Any other key is a parameter of the env (``n``, ``threshold``, ``mode``...).
    """

    model_config = ConfigDict(extra="allow", frozen=True)

    id: str = "single"
    max_concurrent_agents: int | None = Field(default=1, ge=1, le=256)
    timeout_sec: float | None = Field(default=None, gt=0)
    finalize_timeout_sec: float = Field(default=600.0, gt=0)
    roles: dict[str, AgentConfig] = Field(default_factory=dict)

    @property
    def params(self) -> dict[str, Any]:
        """The env's own parameters (the keys this section does not define)."""
        return dict(self.model_extra or {})


class ExecutorConfig(BaseModel):
    """Where trials are dispatched (``[executor]``; ``--executor``, ``--ray-address``).

    The executor changes where trials run, never what they measure: a ``--resume`` may
    name another one.

    Attributes:
        name: An installed executor (``harness executors list``): ``local`` (a thread pool
            in the harness process) or ``ray`` (a Ray task per trial, on a Ray cluster).
        ray_address: The Ray cluster to join: ``auto`` (the one started on this machine by
            ``ray start``), ``HOST:PORT`` of its head, or None to start a private one-node
            cluster for the run.
        kwargs: Options of a plug-in executor.
    """

    model_config = _SECTION

    name: str = "local"
    ray_address: str | None = None
    kwargs: dict[str, Any] = Field(default_factory=dict)


class DatasetsConfig(BaseModel):
    """Tasks by name from a registry (``[tasks.datasets]``; ``-d``, ``-t``, ``--repo``...).

    See docs/datasets.md. The tasks are fetched into the cache and pinned in the run dir's
    ``datasets.lock.json``.

    Attributes:
        names: ``NAME[@VERSION]`` of registry datasets (``-d``).
        tasks: Single tasks, ``[DATASET[@VERSION]/]TASK`` (``-t``).
        registry_path: A local ``registry.json`` (``--registry-path``).
        registry_url: A registry URL (``--registry-url``; default: ``$HARNESS_REGISTRY_URL``,
            else Harbor's public registry).
        repo: A git repository of task dirs, ``OWNER/NAME[@REF]`` or a URL or path with an
            optional ``@REF`` (``--repo``).
        from_lock: Rerun exactly the tasks of this run dir's (or file's) lock (``--from-lock``).
        hub_url: The Harbor Hub read for ``ORG/NAME[@REF]`` datasets and tasks
            (``--hub-url``; default: ``$HARNESS_HUB_URL``, else Harbor's).
    """

    model_config = _SECTION

    names: list[str] = Field(default_factory=list)
    tasks: list[str] = Field(default_factory=list)
    registry_path: str | None = None
    registry_url: str | None = None
    repo: str | None = None
    from_lock: str | None = None
    hub_url: str | None = None

    @property
    def wanted(self) -> bool:
        """Whether any dataset task is asked for."""
        return bool(self.names or self.tasks or self.repo or self.from_lock)


class TasksConfig(BaseModel):
    """Which tasks run (``[tasks]``; the path arguments, ``--task-name``, ``-n``...).

    Selection filters first (``names``, ``exclude``, ``categories``), then shuffles (seeded)
    if asked, then keeps the first ``num_tasks``.

    Attributes:
        paths: Task dirs or task-set folders.
        names: Globs; only tasks whose name or key matches one are run.
        exclude: Globs; tasks whose name or key matches one are left out.
        categories: Only tasks whose ``[metadata].category`` is one of these are run.
        num_tasks: Run only the first N selected tasks.
        shuffle: Shuffle the selected tasks (seeded) before taking ``num_tasks``.
        seed: Seed of the shuffle.
        trial_ids: Run only these trials of the plan (ids as in ``trials.jsonl``); what
            ``harness trials --retry-failed`` and ``harness regrade`` pick. Empty: all.
        skip_invalid: Run the valid tasks of a set, listing the invalid ones, instead of
            refusing the whole set.
        env_allow: Host variables a task's ``${VAR}`` templates may read (``--task-env``);
            any other takes its ``:-default`` or is an error. Provider keys are refused
            even when listed.
        datasets: Tasks by name from a registry (:class:`DatasetsConfig`), besides ``paths``.
    """

    model_config = _SECTION

    paths: list[str] = Field(default_factory=list)
    names: list[str] = Field(default_factory=list)
    exclude: list[str] = Field(default_factory=list)
    categories: list[str] = Field(default_factory=list)
    num_tasks: int | None = Field(default=None, ge=1)
    shuffle: bool = False
    seed: int = 0
    trial_ids: list[str] = Field(default_factory=list)
    skip_invalid: bool = False
    env_allow: list[str] = Field(default_factory=list)

    @field_validator("env_allow")
    @classmethod
    def _variable_names(cls, value: list[str]) -> list[str]:
        for name in value:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"{name!r} is not an environment variable name")
        return sorted(set(value))

    datasets: DatasetsConfig = Field(default_factory=DatasetsConfig)

    @model_validator(mode="after")
    def _some_tasks(self) -> TasksConfig:
        if not self.paths and not self.datasets.wanted:
            raise ValueError(NO_TASKS)
        return self


class RetryConfig(BaseModel):
    """Whole-trial retries (``[retry]`` in a config file, ``--set retry.KEY=VALUE``).

    A finished attempt is retried when its status or one of its error ``type`` names is in
    :attr:`include` and none of them is in :attr:`exclude`, while retries are left.
    ``completed`` and ``cancelled`` trials are never retried. The wait before retry *n*
    (1-based) is ``min(backoff_max_sec, backoff_sec * backoff_multiplier ** (n - 1))``,
    shortened by a random fraction of up to :attr:`jitter`.

    Attributes:
        max_retries: Retries per trial and invocation (0 disables retries).
        include: Statuses or error type names that make an attempt retryable.
        exclude: Statuses or error type names that make an attempt final.
        on_causes: Typed causes of an agent's failure (``errors[].cause``:
            ``rate_limit``, ``authentication``, ``context_window``, ``refusal``,
            ``budget_spent``, ``unknown``) that make an ``agent_error`` attempt retryable,
            as if its status were in :attr:`include`; :attr:`exclude` still wins.
        backoff_sec: Wait before the first retry, in seconds.
        backoff_max_sec: Longest wait between attempts.
        backoff_multiplier: Growth of the wait from one retry to the next.
        jitter: Fraction (0..1) of the wait that is randomised away.
        engine_wait_sec: How long the run waits, paused, for a sandbox engine that stopped
            answering (a Docker restart) before it stops in order; attempts the outage
            broke are rerun without spending retries.
    """

    model_config = _SECTION

    max_retries: int = Field(default=2, ge=0, le=100)
    include: list[str] = Field(default_factory=lambda: ["environment_error"])
    exclude: list[str] = Field(default_factory=list)
    on_causes: list[str] = Field(default_factory=list)
    backoff_sec: float = Field(default=1.0, ge=0, le=3600)
    backoff_max_sec: float = Field(default=60.0, ge=0, le=86400)
    backoff_multiplier: float = Field(default=2.0, ge=1, le=100)
    jitter: float = Field(default=0.5, ge=0, le=1)
    engine_wait_sec: float = Field(default=1800.0, ge=0, le=7 * 86400)

    @field_validator("include")
    @classmethod
    def _retryable(cls, value: list[str]) -> list[str]:
        bad = [name for name in value if name in _NEVER_RETRIED]
        if bad:
            raise ValueError(
                f"{', '.join(bad)} can never be retried (a completed trial is a result, a "
                "cancelled one is rerun by --resume)"
            )
        return value

    @field_validator("on_causes")
    @classmethod
    def _known_causes(cls, value: list[str]) -> list[str]:
        bad = [name for name in value if name not in AGENT_ERROR_CAUSES]
        if bad:
            raise ValueError(
                f"unknown cause(s) {', '.join(bad)}: retry.on_causes takes "
                f"{', '.join(AGENT_ERROR_CAUSES)}"
            )
        return value

    def retryable(
        self, status: str, error_types: Iterable[str], causes: Iterable[str] = ()
    ) -> bool:
        """Whether an attempt that ended with ``status`` and these errors is retried.

        Args:
            status: The attempt's status (e.g. ``environment_error``).
            error_types: The ``type`` of each of its errors.
            causes: The typed ``cause`` of each of its errors that has one.

        Returns:
            True when a name matches :attr:`include` (or an ``agent_error``'s cause matches
            :attr:`on_causes`) and none matches :attr:`exclude`.
        """
        if status in _NEVER_RETRIED:
            return False
        names = {status, *error_types}
        if names.intersection(self.exclude):
            return False
        by_cause = status == "agent_error" and bool(set(causes).intersection(self.on_causes))
        return by_cause or bool(names.intersection(self.include))

    def delay(self, retry: int, random_fraction: float) -> float:
        """Seconds to wait before retry number ``retry`` (1-based).

        Args:
            retry: Which retry this is (1 for the first).
            random_fraction: A uniform random number in [0, 1).

        Returns:
            The backoff, with jitter applied.
        """
        exponent = max(retry - 1, 0)
        base = min(self.backoff_max_sec, self.backoff_sec * self.backoff_multiplier**exponent)
        return base * (1.0 - self.jitter * random_fraction)


class BudgetConfig(BaseModel):
    """Per-trial model budgets (``[budget]``, ``--set budget.max_calls=N``).

    Once a trial has spent one, the gateway answers every further call with HTTP 429.

    Attributes:
        max_calls: Model calls per trial.
        max_tokens: Input plus output tokens per trial.
        max_cost_usd: Cost per trial (only for models with prices).
    """

    model_config = _SECTION

    max_calls: int | None = Field(default=None, ge=1)
    max_tokens: int | None = Field(default=None, ge=1)
    max_cost_usd: float | None = Field(default=None, gt=0)


class GatewayConfig(BaseModel):
    """What one trial may make the model gateway hold (``[gateway]``, ``--set gateway.x=N``).

    The gateway runs in the harness process: these caps are per trial, so one trial's
    flood never starves another's calls (docs/model-access.md §6).

    Attributes:
        max_connections: Connections a trial may have open at once (one more: HTTP 503).
        max_request_mb: Size of one request body (over: HTTP 413, checked from
            ``Content-Length`` before the body is read). Large contexts are a few MB.
        max_memory_mb: Everything a trial's connections hold at once: bodies, their
            parsed form, upstream answers (over: HTTP 503, or 502 for an upstream answer).
        max_recorded_refusals: Refusals recorded one line each; later ones are counted in
            one summary line.
    """

    model_config = _SECTION

    max_connections: int = Field(default=32, ge=1, le=4096)
    max_request_mb: float = Field(default=16.0, gt=0, le=1024)
    max_memory_mb: float = Field(default=128.0, gt=0, le=16384)
    max_recorded_refusals: int = Field(default=1000, ge=0)

    @model_validator(mode="after")
    def _room_for_a_request(self) -> GatewayConfig:
        if self.max_memory_mb < self.max_request_mb:
            raise ValueError(
                f"max_memory_mb ({self.max_memory_mb:g}) must be at least max_request_mb "
                f"({self.max_request_mb:g}): a request's body is held in that memory"
            )
        return self


class EvidenceCapsConfig(BaseModel):
    """Caps on what a trial's evidence walks keep (``[evidence_caps]``; docs/run-dir.md).

    Every host-side reader of an agent-written tree (the workspace, logs, the session dir,
    artifacts, ``/logs/artifacts``, a separate verifier's inputs) walks it under these caps.
    Past one, the trial keeps what was read and records a ``limit`` evidence event naming
    the cap; it is graded as usual, never an ``environment_error``.

    Attributes:
        file_bytes: Bytes kept of one file (a longer one is kept truncated).
        total_bytes: Bytes kept of one tree.
        files: Files whose content one tree keeps (unchanged seed files cost none).
        alloc_bytes: Disk one tree's copy may take as allocated blocks: each kept file
            rounded up to 4 KiB blocks and each dir it needs one block, so that many
            tiny files are bounded as well as big ones.
        entries: Entries (of any kind) one walk lists: it bounds the walk and the manifest.
        depth: Dir levels entered below the walked dir (deeper subtrees are not kept).
        path_bytes: Bytes of an entry's path below the walked dir (longer: not kept).
    """

    model_config = _SECTION

    file_bytes: int = Field(default=16 << 20, ge=1)
    total_bytes: int = Field(default=64 << 20, ge=1)
    files: int = Field(default=_EVIDENCE_DEFAULTS.max_files, ge=1)
    alloc_bytes: int = Field(default=_EVIDENCE_DEFAULTS.max_alloc_bytes, ge=4096)
    entries: int = Field(default=_EVIDENCE_DEFAULTS.max_entries, ge=1)
    depth: int = Field(default=_EVIDENCE_DEFAULTS.max_depth, ge=1, le=1024)
    path_bytes: int = Field(default=_EVIDENCE_DEFAULTS.max_path_bytes, ge=16, le=3072)

    def limits(self) -> Limits:
        """The walk caps (all but the byte caps) as the evidence code takes them."""
        return Limits(
            max_depth=self.depth,
            max_path_bytes=self.path_bytes,
            max_entries=self.entries,
            max_files=self.files,
            max_alloc_bytes=self.alloc_bytes,
        )


class RunConfig(BaseModel):
    """Everything that decides what a run does. Never holds a secret.

    Attributes:
        agent: The agent (``[agent]``).
        sandbox: The sandbox backend (``[sandbox]``).
        executor: Where trials are dispatched (``[executor]``).
        tasks: The task selection (``[tasks]``).
        retry: Whole-trial retries (``[retry]``).
        budget: Per-trial model budgets enforced by the gateway (``[budget]``).
        gateway: Per-trial caps of the model gateway (``[gateway]``).
        env: The episode env (``[env]``): who takes part in each trial and how.
        model: The model the agent uses (``provider/name``).
        models: Extra model catalog files (``--models``), later ones win.
        rollouts: Trials per task.
        concurrency: Trials running at once (``-j``).
        agent_concurrency: Agent phases running at once across the run's trials
            (None: bounded by ``concurrency`` only).
        output_dir: Where run dirs are created.
        run_name: Name of the run dir (default: ``<taskset>--<model>--<agent>--<8 hex>``).
        fail_under: Exit 1 when the mean reward is below this.
        fail_on_tampering: Exit 1 when any trial's verdict was taken after tampering (its
            record's ``tampered_verdict``).
        threshold: Reward at or above which a trial counts as a success.
        evidence: How a trial's final workspace is kept: ``diff`` (a manifest of every
            file, the changed ones stored once per run), ``full`` (a full copy) or
            ``none`` (the manifest only).
        evidence_caps: Caps on what the evidence walks keep (``[evidence_caps]``).
        network: ``task`` (each phase gets its task's network policy) or ``none`` (no
            agent phase gets the internet, whatever its task says; ``--network``).
        judges: Judges every trial of the run gets besides its task's ``[[verifier.judges]]``
            (a run judge replaces a task judge of the same name); see ``harness.judges``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    agent: AgentConfig = Field(default_factory=AgentConfig)
    sandbox: SandboxConfig = Field(default_factory=SandboxConfig)
    executor: ExecutorConfig = Field(default_factory=ExecutorConfig)
    tasks: TasksConfig
    retry: RetryConfig = Field(default_factory=RetryConfig)
    budget: BudgetConfig = Field(default_factory=BudgetConfig)
    gateway: GatewayConfig = Field(default_factory=GatewayConfig)
    env: EnvConfig = Field(default_factory=EnvConfig)
    model: str | None = None
    models: list[str] = Field(default_factory=list)
    rollouts: int = Field(default=1, ge=1)
    concurrency: int = Field(default=1, ge=1, le=256)
    agent_concurrency: int | None = Field(default=None, ge=1, le=256)
    output_dir: str = "runs"
    run_name: str | None = None
    fail_under: float | None = None
    fail_on_tampering: bool = False
    threshold: float = 1.0
    evidence: Literal["full", "diff", "none"] = "diff"
    evidence_caps: EvidenceCapsConfig = Field(default_factory=EvidenceCapsConfig)
    network: Literal["task", "none"] = "task"
    judges: list[JudgeSpec] = Field(default_factory=list)

    @model_validator(mode="before")
    @classmethod
    def _flat_keys(cls, data: Any) -> Any:
        """Move harness 0.1's flat keys into their sections."""
        return sectioned(data) if isinstance(data, dict) else data

    @field_validator("fail_under", "threshold")
    @classmethod
    def _finite(cls, value: float | None) -> float | None:
        if value is not None and not math.isfinite(value):
            raise ValueError("must be a finite number")
        return value

    @field_validator("run_name")
    @classmethod
    def _run_name(cls, value: str | None) -> str | None:
        if value is not None and not _RUN_NAME.match(value):
            raise ValueError(
                "must be 1-128 characters of letters, digits, '.', '_' or '-', starting with "
                "a letter or digit (it names the run dir and labels its containers)"
            )
        return value


__all__ = [
    "AgentConfig",
    "BudgetConfig",
    "EnvConfig",
    "EvidenceCapsConfig",
    "ExecutorConfig",
    "GatewayConfig",
    "RetryConfig",
    "RunConfig",
    "TasksConfig",
]
