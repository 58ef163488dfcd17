"""The ``[sandbox]`` section of a run's config: which backend runs trials, and how.

Defined in ``sandbox`` because a backend is opened with it (:class:`sandbox.plugin.BackendOptions`);
the run config (``harness.config``) holds it as its ``[sandbox]`` section. Frozen; unknown keys
are refused (a plug-in backend's own options go in ``kwargs``).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: First uid/gid of the local sandbox's identities: far from every account and service (65534
#: is "nobody", which gVisor's own processes and many daemons run as: a sweep must never
#: touch them).
DEFAULT_SANDBOX_UID = 1_600_000_000
DEFAULT_SANDBOX_GID = 1_600_000_000


class SandboxConfig(BaseModel):
    """Where trials run (``[sandbox]``; ``--sandbox``, ``--runtime``, ``--base-alias``).

    Attributes:
        backend: An installed sandbox backend (``harness sandbox list``).
        runtime: Container runtime for the docker backend (e.g. ``runsc``).
        base_aliases: ``FROM=LOCAL`` rewrites of Dockerfile base images (and of a task's
            ``docker_image``).
        pull: When to pull a task's ``docker_image``: ``missing`` (default), ``always``,
            ``never``.
        force_build: Build a task's ``environment/Dockerfile`` even when it names a
            ``docker_image`` (which is then neither pulled nor used).
        builder: Which image builder: ``auto`` (BuildKit where the engine and a docker CLI
            have it, else the legacy builder), ``buildkit``, ``legacy``.
        uid: First uid of the local sandbox's per-trial identities.
        gid: First gid of the local sandbox's per-trial identities.
        expose: Host paths the local sandbox's agents see read-only (at the same path), e.g.
            where an agent CLI is installed; nothing else of the host is visible to them.
        compose_host_access: ``deny`` (default): a task with compose sidecars runs only
            where the docker backend can keep its network off the host's own services: by
            host rules (root, a local engine, iptables), else by an engine-made network
            without a host address or the internet; refused where neither holds.
            ``allow``: neither, the sidecars with the internet and its agent able to
            connect to every service the host listens on (insecure).
        local_limits: ``require`` (default): the local sandbox enforces every trial's
            ``memory_mb``, ``cpus`` and ``pids`` in a cgroup of its own, and a run where no
            cgroup can be made (not root, no usable cgroup v2/v1 controllers) is refused.
            ``warn``: run there anyway, the limits not enforced, saying so at the start and
            in every record (``sandbox.limits.problem``).
        require_limits: The docker backend: ``false`` (default) runs where the engine
            cannot enforce a trial's ``memory_mb``, ``cpus`` or ``pids`` (rootless Docker on
            a cgroup v1 host has no cgroup driver), saying so in one line at the start and
            in every record (``sandbox.limits.enforced``); ``true`` refuses such a run. The
            local sandbox's limits follow ``local_limits``.
        agent_root: Who the agent may be (``--agent-root``): ``never`` (default) runs it
            as an unprivileged uid whatever the task or image says, naming up front the
            tasks whose agents wanted root; ``isolated`` runs it as the task's
            ``[agent].user``, else the image's ``USER`` (root included, as Harbor does),
            only behind a second boundary (``--runtime runsc`` or an engine that remaps
            user namespaces), refused elsewhere before anything runs; ``allow`` does so on
            any runtime of the docker backend (docs/security.md, "A root agent").
        agent_services: What of the agent's processes outlives its phase
            (``--agent-services``): ``kill`` (default) kills every one before the tests
            arrive; ``keep`` keeps those holding a listening socket (a server the tests
            query), each trial's record listing them (``agent_processes_alive``). Docker
            backend only; a root agent's (``agent_root`` ``allow``/``isolated``) run in a
            Landlock domain, on runc only; refused elsewhere before anything runs
            (docs/security.md, "Services the agent leaves running").
        cpu_policy: How a task's ``cpus`` applies (``--cpus``): ``limit`` (default, a
            cap), ``request`` (a weight only), ``guarantee`` (both) or ``ignore``, as
            Harbor 0.22's policies; each record says what held
            (:mod:`sandbox.resource_policy`).
        memory_policy: How a task's ``memory_mb`` applies (``--memory``): the same four;
            ``request`` and ``ignore`` leave a trial's memory uncapped.
        kwargs: Options of a plug-in backend.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    backend: str = "local"
    runtime: str | None = None
    base_aliases: list[str] = Field(default_factory=list)
    pull: Literal["missing", "always", "never"] = "missing"
    force_build: bool = False
    builder: Literal["auto", "buildkit", "legacy"] = "auto"
    uid: int = Field(default=DEFAULT_SANDBOX_UID, gt=0)
    gid: int = Field(default=DEFAULT_SANDBOX_GID, gt=0)
    expose: list[str] = Field(default_factory=list)
    compose_host_access: Literal["deny", "allow"] = "deny"
    local_limits: Literal["require", "warn"] = "require"
    require_limits: bool = False
    agent_root: Literal["never", "isolated", "allow"] = "never"
    agent_services: Literal["kill", "keep"] = "kill"
    cpu_policy: Literal["limit", "request", "guarantee", "ignore"] = "limit"
    memory_policy: Literal["limit", "request", "guarantee", "ignore"] = "limit"
    kwargs: dict[str, Any] = Field(default_factory=dict)

    @field_validator("expose")
    @classmethod
    def _absolute_paths(cls, value: list[str]) -> list[str]:
        for path in value:
            if not path.startswith("/"):
                raise ValueError(f"{path!r} is not an absolute path")
        return value


__all__ = ["DEFAULT_SANDBOX_GID", "DEFAULT_SANDBOX_UID", "SandboxConfig"]
