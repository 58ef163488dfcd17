"""Pydantic models for a task's ``task.toml`` (Harbor / Terminal-Bench 2 compatible).

The schema follows Harbor's ``task.toml`` (see docs/tasks.md). Validation is strict about
types, so a typo such as ``timeout_sec = "ten"`` is an error instead of being coerced:
strings are never read as numbers, numbers never as strings, and booleans must be real TOML
booleans. Integers are accepted where a float is expected.

Unknown keys are allowed at every level (Harbor keeps adding fields). They are kept in each
model's ``model_extra`` and listed by :meth:`TaskConfig.unknown_keys`, so callers can warn
about them without failing. Keys the harness knows but does not implement are listed by
:meth:`TaskConfig.unsupported_keys`: a task that uses one is invalid, because dropping such a
key would change what a trial means.

Harbor's older spellings map onto the same model: the legacy top-level ``version`` (Harbor
1.0 and Terminal-Bench 2 tasks) is ``schema_version``, and ``[environment].memory`` /
``storage`` strings such as ``"2G"`` set ``memory_mb`` / ``storage_mb``.
"""

from __future__ import annotations

import json
import posixpath
import re
from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from harness.tasks.network_keys import NetworkKeys
from harness.tasks.section import NAME_PATTERN, UNSUPPORTED_KEYS, Section, User, size_to_mb
from sandbox.storage import RESERVE_MB

#: The compose service that is the agent's container.
MAIN_SERVICE = "main"
#: A compose service name (Harbor's and compose's rule).
SERVICE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$"
#: A collect hook's ``user``: a name or id, optionally ``:group``; never an option.
COLLECT_USER_PATTERN = r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}(:[A-Za-z0-9_][A-Za-z0-9_.-]{0,31})?"
#: The longest collect hook ``command``.
MAX_COLLECT_COMMAND_CHARS = 65536
#: The most collect hooks a table may declare.
MAX_COLLECT_HOOKS = 32
#: A collect hook's ``timeout_sec`` is capped here when it runs.
MAX_COLLECT_TIMEOUT_SEC = 600.0

__all__ = [
    "MAIN_SERVICE",
    "MAX_COLLECT_TIMEOUT_SEC",
    "UNSUPPORTED_KEYS",
    "AgentSection",
    "Artifact",
    "CollectHook",
    "EnvironmentSection",
    "HarnessSection",
    "Healthcheck",
    "McpServer",
    "StepAgent",
    "StepSection",
    "StepVerifier",
    "SolutionSection",
    "TaskConfig",
    "TaskSection",
    "User",
    "VerifierSection",
]


class TaskSection(Section):
    """The ``[task]`` table: registry package info.

    Attributes:
        name: The task's name (Harbor uses ``org/name``); when set, it is the task's key.
        description: A one-line description.
        version: The task package's version (schema 1.4; any non-empty string, usually
            semantic); carried into each trial's record (``task.version``).
        authors: ``[{name, email}]`` (informational).
        keywords: Search keywords (informational).
    """

    name: str | None = Field(default=None, min_length=1)
    version: str | None = Field(default=None, min_length=1, max_length=128)
    description: str | None = None
    authors: list[dict[str, str]] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)


class AgentSection(NetworkKeys):
    """The ``[agent]`` table: how the agent phase runs.

    Attributes:
        timeout_sec: Wall-clock limit for the agent, in seconds. Defaults to 600 s (Harbor
            ≤ Jan 2026); TOML has no null, so ``None`` only arises programmatically and means
            "no limit", as in Harbor ≥ 0.7.
        user: User to run the agent as (name or uid); None means the image's default user.
        network_mode: The agent phase's network (the oracle's too), over the
            environment's (:mod:`harness.tasks.networks`).
        allowed_hosts: What its ``allowlist`` lets through.
    """

    timeout_sec: float | None = Field(default=600.0, gt=0)
    user: User = None


class Healthcheck(Section):
    """``[environment.healthcheck]`` (or a step's): a command that must pass before the agent.

    Docker ``HEALTHCHECK`` semantics: failures during the start period do not count; after
    it, ``retries`` consecutive failures fail the trial (``environment_error``).

    Attributes:
        command: Shell command; exit 0 means healthy.
        interval_sec: Time between attempts after the start period.
        timeout_sec: Limit for one attempt.
        start_period_sec: Grace period in which failures do not count.
        start_interval_sec: Time between attempts during the start period.
        retries: Consecutive failures that fail the check.
    """

    command: str = Field(min_length=1)
    interval_sec: float = Field(default=5.0, ge=0)
    timeout_sec: float = Field(default=30.0, gt=0)
    start_period_sec: float = Field(default=0.0, ge=0)
    start_interval_sec: float = Field(default=5.0, ge=0)
    retries: int = Field(default=3, ge=1)


class McpServer(Section):
    """One ``[[environment.mcp_servers]]`` entry: an MCP server the agent may use.

    Attributes:
        name: The server's name; for a server of the task's compose file, also the host
            name the agent reaches it by.
        transport: ``sse``, ``streamable-http`` or ``stdio``.
        url: The server's URL (``sse`` and ``streamable-http``).
        command: The command the agent starts (``stdio``).
        args: Its arguments.
    """

    name: str = Field(pattern=NAME_PATTERN)
    transport: Literal["sse", "streamable-http", "stdio"] = "sse"
    url: str | None = Field(default=None, min_length=1)
    command: str | None = Field(default=None, min_length=1)
    args: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _transport_fields(self) -> McpServer:
        if self.transport != "stdio" and not self.url:
            raise ValueError(f"'url' is required for transport {self.transport!r}")
        if self.transport == "stdio" and not self.command:
            raise ValueError("'command' is required for transport 'stdio'")
        return self


class Artifact(Section):
    """One entry of ``artifacts``: a path collected into the trial's evidence.

    A bare string ``"/app/out.txt"`` means ``{source = "/app/out.txt"}``.

    Attributes:
        source: Absolute in-sandbox path of a file or directory.
        destination: Where it goes under the trial's ``artifacts/`` (default: the
            source's base name); a relative path without ``..``.
        exclude: Glob patterns of paths (relative to a directory source) to leave out.
        service: The compose service whose filesystem ``source`` is in (schema 1.4); None
            (or ``main``) is the agent's container.
    """

    source: str = Field(pattern=r"^/")
    destination: str | None = Field(default=None, min_length=1)
    exclude: list[str] = Field(default_factory=list)
    service: str | None = Field(default=None, pattern=SERVICE_PATTERN)

    @property
    def sidecar(self) -> str | None:
        """The sidecar this artifact is collected from (None: the agent's container)."""
        return None if self.service in (None, MAIN_SERVICE) else self.service

    @model_validator(mode="before")
    @classmethod
    def _from_string(cls, data: Any) -> Any:
        return {"source": data} if isinstance(data, str) else data

    @field_validator("source")
    @classmethod
    def _clean_source(cls, value: str) -> str:
        if "\0" in value or any(part in (".", "..") for part in value.split("/")):
            raise ValueError(
                f"source {value!r} must be a plain absolute path (no '.' or '..' components)"
            )
        return value

    @field_validator("destination")
    @classmethod
    def _relative(cls, value: str | None) -> str | None:
        if value is not None:
            parts = [part for part in value.split("/") if part not in ("", ".")]
            if value.startswith("/") or ".." in parts or "\0" in value:
                raise ValueError("destination must be a relative path without '..'")
            if not parts:
                raise ValueError(
                    f"destination {value!r} is the artifacts dir itself; name a path inside it"
                )
            return "/".join(parts)
        return value

    @property
    def target(self) -> str:
        """The path under ``artifacts/`` this artifact is copied to."""
        return self.destination or self.source.rstrip("/").rsplit("/", 1)[-1] or "root"


class CollectHook(Section):
    """One ``[[verifier.collect]]`` hook (schema 1.4): task code run after the agent phase.

    It runs inside a compose service (``main``: the agent's container, confined like the
    verifier) before grading, to snapshot state into files an artifact then collects
    (:mod:`harness.trial.collect`). Every field is hostile input: the service must be one
    of the task's, the user a plain name or id, the command one string for the service's
    ``sh -c`` (never a host shell), its time capped when it runs.

    Attributes:
        command: Shell command, run by ``sh -c`` in the service.
        service: The compose service it runs in (default ``main``).
        timeout_sec: Limit for the command (capped at
            :data:`~harness.tasks.model.MAX_COLLECT_TIMEOUT_SEC` when it runs).
        user: The user (name or id, ``user[:group]``) in a sidecar; None is the service's
            default user. In ``main`` hooks run as the verifier.
    """

    command: str = Field(min_length=1, max_length=MAX_COLLECT_COMMAND_CHARS)
    service: str = Field(default=MAIN_SERVICE, pattern=SERVICE_PATTERN)
    timeout_sec: float = Field(default=60.0, gt=0)
    user: str | int | None = None

    @field_validator("command")
    @classmethod
    def _no_nul(cls, value: str) -> str:
        if "\0" in value:
            raise ValueError("command must not contain a NUL byte")
        return value

    @field_validator("user")
    @classmethod
    def _plain_user(cls, value: str | int | None) -> str | int | None:
        if value is None:
            return None
        if isinstance(value, bool) or (isinstance(value, int) and not 0 <= value < 1 << 31):
            raise ValueError("user must be a uid in [0, 2^31) or a user name")
        if isinstance(value, str) and not re.fullmatch(COLLECT_USER_PATTERN, value):
            raise ValueError(
                f"user {value[:64]!r} must be a user name or id, optionally ':group' "
                "(letters, digits, '_', '.', '-'; not starting with '-')"
            )
        return value


MIN_STORAGE_MB = RESERVE_MB
"""The smallest ``storage_mb``: the trial's ext4 filesystem is ``storage_mb`` plus a
reserve of :data:`sandbox.storage.RESERVE_MB` held as reserved blocks, and ``mkfs.ext4 -m``
refuses more than 50 % reserved."""

#: Directories a task's ``workdir`` may not be (nor, for the last three, be under).
SYSTEM_DIRS = frozenset(
    {"/", "/etc", "/usr", "/bin", "/sbin", "/boot", "/var", "/run", "/opt", "/srv", "/mnt"}
    | {"/media", "/usr/bin", "/usr/sbin", "/usr/lib", "/usr/local", "/usr/share", "/var/lib"}
)
_SYSTEM_TREES = ("/proc", "/sys", "/dev")


def system_dir(path: str) -> bool:
    """Whether ``path`` (normalised) is a system directory a ``workdir`` may not be."""
    if not path.startswith("/"):
        return False
    normal = "/" + posixpath.normpath(path).lstrip("/")
    if normal in SYSTEM_DIRS or re.fullmatch(r"/lib[^/]*", normal):
        return True
    return any(normal == top or normal.startswith(top + "/") for top in _SYSTEM_TREES)


class EnvironmentSection(NetworkKeys):
    """The ``[environment]`` table: the container the task runs in.

    Attributes:
        docker_image: A prebuilt image; when set, ``environment/Dockerfile`` is not built
            (unless the run forces the build: ``--force-build``).
        os: ``linux`` or ``windows`` (windows is refused per trial: unsupported).
        cpus: CPU limit (may be fractional).
        memory_mb: Memory limit in MiB.
        storage_mb: Disk limit in MiB, or None for the backend's default.
        gpus: GPUs the task needs (device requests; an engine without GPUs fails the
            trial).
        gpu_types: Acceptable GPU types (``["H100", "A100"]``); None means any.
        allow_internet: The older spelling of ``network_mode``: ``true`` is ``public``,
            ``false`` is ``no-network`` (both given and disagreeing: a task error). Read it
            through :mod:`harness.tasks.networks`, never alone: unset, the field is False,
            and the policy is Harbor's default.
        network_mode: Every phase's network unless a phase's table says otherwise.
        allowed_hosts: What its ``allowlist`` lets through.
        mcp_servers: MCP servers the agent may use.
        workdir: Working directory for the agent and the tests; overrides the image's
            WORKDIR.
        env: Extra environment variables for the container; ``${VAR}`` and
            ``${VAR:-default}`` are resolved from the host.
        skills_dir: A directory in the environment whose files are copied to the agent's
            ``$HOME/skills`` (``$HARNESS_SKILLS_DIR``).
        healthcheck: A check that must pass before the agent starts.
        build_timeout_sec: Limit for building the image, in seconds.
        memory: Deprecated spelling of ``memory_mb`` (``"2G"``).
        storage: Deprecated spelling of ``storage_mb`` (``"10G"``).
    """

    docker_image: str | None = Field(default=None, min_length=1)
    os: Literal["linux", "windows"] = "linux"
    cpus: float = Field(default=1.0, gt=0)
    memory_mb: int = Field(default=2048, gt=0)
    storage_mb: int | None = Field(default=None, ge=MIN_STORAGE_MB)
    gpus: int = Field(default=0, ge=0)
    gpu_types: list[str] | None = None
    allow_internet: bool = False
    mcp_servers: list[McpServer] = Field(default_factory=list)
    workdir: str | None = Field(default=None, min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    skills_dir: str | None = Field(default=None, min_length=1)
    healthcheck: Healthcheck | None = None
    build_timeout_sec: float = Field(default=600.0, gt=0)
    memory: str | None = None
    storage: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _legacy_sizes(cls, data: Any) -> Any:
        """``memory = "2G"`` / ``storage = "10G"`` set ``memory_mb`` / ``storage_mb``."""
        if not isinstance(data, dict):
            return data
        data = dict(data)
        if isinstance(data.get("os"), str):
            data["os"] = data["os"].lower()
        for legacy, field in (("memory", "memory_mb"), ("storage", "storage_mb")):
            value = data.get(legacy)
            if isinstance(value, str) and field not in data:
                try:
                    data[field] = size_to_mb(value)
                except ValueError:
                    pass  # reported by the field validator, under the legacy key
        return data

    @field_validator("memory", "storage")
    @classmethod
    def _size(cls, value: str | None) -> str | None:
        if value is not None:
            size_to_mb(value)
        return value

    @field_validator("workdir")
    @classmethod
    def _not_a_system_dir(cls, value: str | None) -> str | None:
        if value is not None and system_dir(value):
            raise ValueError(
                f"{value!r} is a system directory; the agent and the tests work (and the "
                "workspace is mounted) there: use a directory of the task's own, e.g. /app"
            )
        return value

    @model_validator(mode="after")
    def _internet_agrees(self) -> EnvironmentSection:
        if "allow_internet" in self.model_fields_set and self.network_mode is not None:
            said = "public" if self.allow_internet else "no-network"
            if said != self.network_mode:
                raise ValueError(
                    f"allow_internet = {str(self.allow_internet).lower()} (network_mode = "
                    f"{said!r}) contradicts network_mode = {self.network_mode!r}; drop "
                    "allow_internet (network_mode replaces it)"
                )
        return self

    @model_validator(mode="after")
    def _unique_mcp_names(self) -> EnvironmentSection:
        names = [server.name for server in self.mcp_servers]
        if len(names) != len(set(names)):
            raise ValueError("mcp_servers: two servers have the same name")
        return self


class VerifierSection(NetworkKeys):
    """The ``[verifier]`` table: how ``tests/test.sh`` runs.

    Attributes:
        timeout_sec: Wall-clock limit for the tests, in seconds.
        env: Extra environment variables for the tests (``${VAR}`` resolved from the host).
        user: User to run the tests as (name or uid); None means the image's default user.
        environment_mode: ``shared`` (the agent's container) or ``separate`` (a fresh
            container built from ``tests/``); unset means ``separate`` when
            ``environment`` is set, else ``shared``.
        environment: The separate verifier container's ``[environment]``.
        judges: ``[[verifier.judges]]``: judges that score the trial's final state after
            the tests (a harness extension Harbor ignores). Each table is checked as a
            judge by ``harness.judges`` (``harness tasks check``, and before a run).
        collect: ``[[verifier.collect]]`` hooks, run after the agent, before grading.
        network_mode: The verifier phase's network, over the environment's.
        allowed_hosts: What its ``allowlist`` lets through.
    """

    timeout_sec: float = Field(default=600.0, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: User = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: EnvironmentSection | None = None
    judges: list[dict[str, Any]] = Field(default_factory=list)
    collect: list[CollectHook] = Field(default_factory=list, max_length=MAX_COLLECT_HOOKS)

    @model_validator(mode="after")
    def _mode_matches_environment(self) -> VerifierSection:
        if self.environment_mode == "shared" and self.environment is not None:
            raise ValueError(
                "environment_mode = 'shared' conflicts with [verifier.environment]; drop one"
            )
        return self

    @property
    def mode(self) -> Literal["shared", "separate"] | None:
        """The mode this table asks for (None: not said here)."""
        if self.environment_mode is not None:
            return self.environment_mode
        return "separate" if self.environment is not None else None


class HarnessSection(Section):
    """The ``[harness]`` table: this harness's own task keys (Harbor ignores the table).

    Attributes:
        expected_root_changes: Paths of the image root the task's agent is expected to
            change (``/etc/nginx``, ``/usr/lib/python3/dist-packages/*``): a change at or
            under one is never a ``tampering`` event. Absolute, ``*`` within a component.
    """

    expected_root_changes: list[str] = Field(default_factory=list, max_length=256)

    @field_validator("expected_root_changes")
    @classmethod
    def _absolute_paths(cls, value: list[str]) -> list[str]:
        for path in value:
            parts = [part for part in path.split("/") if part]
            if (
                not path.startswith("/")
                or not parts
                or any(part in (".", "..") for part in parts)
                or "\x00" in path
                or len(path) > 4096
            ):
                raise ValueError(
                    f"expected_root_changes: {path!r} is not an absolute path below / "
                    "(write the dirs the agent changes, such as '/etc/nginx')"
                )
        return value


class SolutionSection(Section):
    """The ``[solution]`` table: how the reference solution runs (``oracle`` agent only).

    Attributes:
        env: Extra environment variables for ``solution/solve.sh``.
    """

    env: dict[str, str] = Field(default_factory=dict)


class StepAgent(NetworkKeys):
    """A step's ``agent`` table; unset values fall back to the task's ``[agent]``.

    Attributes:
        timeout_sec: The step's agent time limit.
        user: The step's agent user.
        network_mode: The step's agent network, over the task's ``[agent]``.
        allowed_hosts: What its ``allowlist`` lets through.
    """

    timeout_sec: float | None = Field(default=None, gt=0)
    user: User = None


class StepVerifier(NetworkKeys):
    """A step's ``verifier`` table; unset values fall back to the task's ``[verifier]``.

    Attributes:
        timeout_sec: The step's verifier time limit.
        env: Added to the task's ``[verifier].env``.
        user: The step's verifier user.
        environment_mode: As ``[verifier].environment_mode``, for this step.
        environment: As ``[verifier.environment]``, for this step.
        collect: The step's collect hooks, run after the task's.
        network_mode: The step's verifier network, over the task's ``[verifier]``.
        allowed_hosts: What its ``allowlist`` lets through.
    """

    timeout_sec: float | None = Field(default=None, gt=0)
    env: dict[str, str] = Field(default_factory=dict)
    user: User = None
    environment_mode: Literal["shared", "separate"] | None = None
    environment: EnvironmentSection | None = None
    collect: list[CollectHook] = Field(default_factory=list, max_length=MAX_COLLECT_HOOKS)

    @property
    def mode(self) -> Literal["shared", "separate"] | None:
        """The mode this table asks for (None: not said here)."""
        if self.environment_mode is not None:
            return self.environment_mode
        return "separate" if self.environment is not None else None


class StepSection(Section):
    """One ``[[steps]]`` entry of a multi-step task (files in ``steps/<name>/``).

    Attributes:
        name: The step's dir name under ``steps/``.
        agent: The step's agent settings.
        verifier: The step's verifier settings.
        min_reward: End the remaining steps unless this step's ``reward`` reaches it (a
            float), or each named reward reaches its value (a table).
        healthcheck: A check run after the step's setup, before its agent.
        artifacts: Collected after this step, besides the task's.
    """

    name: str = Field(pattern=NAME_PATTERN)
    agent: StepAgent = Field(default_factory=StepAgent)
    verifier: StepVerifier = Field(default_factory=StepVerifier)
    min_reward: float | dict[str, float] | None = None
    healthcheck: Healthcheck | None = None
    artifacts: list[Artifact] = Field(default_factory=list)

    def min_reward_failure(self, rewards: dict[str, float] | None) -> str | None:
        """Why ``rewards`` do not meet ``min_reward`` (None when they do, or no minimum).

        A missing key (or no rewards at all) counts as below any minimum.
        """
        if self.min_reward is None:
            return None
        wanted = (
            {"reward": float(self.min_reward)}
            if isinstance(self.min_reward, int | float)
            else self.min_reward
        )
        for key, threshold in wanted.items():
            actual = (rewards or {}).get(key)
            if actual is None or actual < threshold:
                shown = "missing" if actual is None else f"{actual:g}"
                return f"{key} = {shown}, below min_reward {threshold:g}"
        return None


class TaskConfig(Section):
    """A whole ``task.toml`` document.

    Every section is optional and defaults to its model's defaults. The legacy top-level key
    ``version`` is read as ``schema_version`` (as Harbor does); when both are present,
    ``version`` is kept as an unknown key.

    Attributes:
        schema_version: The Harbor schema version the task was written for, if stated.
        source: Where the task comes from (free text).
        task: The ``[task]`` table.
        metadata: The free-form ``[metadata]`` table (difficulty, category, tags, ...).
        agent: The ``[agent]`` table.
        verifier: The ``[verifier]`` table.
        solution: The ``[solution]`` table.
        environment: The ``[environment]`` table.
        steps: ``[[steps]]`` of a multi-step task (None: a single-step task).
        multi_step_reward_strategy: ``mean`` (per-key mean over the graded steps, the
            default) or ``final`` (the last step's rewards).
        artifacts: Paths collected into the trial's evidence after each step.
        harness: The ``[harness]`` table (this harness's own keys).
    """

    schema_version: str | None = None
    source: str | None = None
    task: TaskSection = Field(default_factory=TaskSection)
    metadata: dict[str, Any] = Field(default_factory=dict)
    agent: AgentSection = Field(default_factory=AgentSection)
    verifier: VerifierSection = Field(default_factory=VerifierSection)
    solution: SolutionSection = Field(default_factory=SolutionSection)
    environment: EnvironmentSection = Field(default_factory=EnvironmentSection)
    steps: list[StepSection] | None = Field(default=None, min_length=1)
    multi_step_reward_strategy: Literal["mean", "final"] | None = None
    artifacts: list[Artifact] = Field(default_factory=list)
    harness: HarnessSection = Field(default_factory=HarnessSection)

    @model_validator(mode="before")
    @classmethod
    def _rename_legacy_version(cls, data: Any) -> Any:
        """Read the legacy top-level ``version`` key as ``schema_version``."""
        if isinstance(data, dict) and "version" in data and "schema_version" not in data:
            data = dict(data)
            data["schema_version"] = data.pop("version")
        return data

    @model_validator(mode="after")
    def _unique_step_names(self) -> TaskConfig:
        names = [step.name for step in self.steps or []]
        if len(names) != len(set(names)):
            raise ValueError("steps: two steps have the same name")
        return self

    def verifier_mode(self, step: StepSection | None = None) -> Literal["shared", "separate"]:
        """Where the verifier of the task (or of ``step``) runs.

        A step's own mode wins, then the task's ``[verifier]``, then ``shared``.
        """
        if step is not None and step.verifier.mode is not None:
            return step.verifier.mode
        return self.verifier.mode or "shared"

    def verifier_environment(self, step: StepSection | None = None) -> EnvironmentSection:
        """The ``[environment]`` of a separate verifier container (step's, task's, or main)."""
        if step is not None and step.verifier.environment is not None:
            return step.verifier.environment
        return self.verifier.environment or self.environment

    def normalized_json(self) -> str:
        """Serialise the validated config canonically (sorted keys, no whitespace).

        Defaults are filled in and unknown keys are included, so two documents that mean the
        same thing serialise the same way (fields added since the first release only when
        set: see :meth:`hash_dump`).

        Returns:
            A JSON string, stable across runs and machines.
        """
        return json.dumps(
            self.hash_dump(),
            sort_keys=True,
            separators=(",", ":"),
            ensure_ascii=False,
        )
