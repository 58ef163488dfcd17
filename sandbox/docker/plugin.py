"""The ``docker`` backend: one hardened container per trial (``sandbox.docker``).

Everything it creates carries the run's label, so the next invocation of the run
(``--resume``), a second interrupt, or ``harness sandbox cleanup --run NAME`` removes
whatever a dead invocation left.
"""

from __future__ import annotations

import ipaddress
import logging
from collections.abc import Callable, Sequence
from dataclasses import replace

from typing_extensions import override

from sandbox.agent_root import announcement
from sandbox.backend import Capacity, CloseReport, SandboxSpec
from sandbox.docker import admin, hostguard
from sandbox.docker.aliases import AliasUse, mark_task_images
from sandbox.docker.backend import DockerSandbox
from sandbox.docker.boundary import isolated_refusal, second_boundary
from sandbox.docker.compose import engine_network_problem
from sandbox.docker.engine import (
    connect,
    engine_address,
    engine_failure,
    ping,
    pinger,
    remove_leaks,
)
from sandbox.docker.gpus import gpu_probe
from sandbox.docker.images import ImageResolver, parse_aliases
from sandbox.docker.labels import MANAGED, RUN
from sandbox.docker.landlock_wall import landlock_refusal
from sandbox.docker.limits import engine_gaps, gap_line
from sandbox.docker.pulls import ImagePuller
from sandbox.docker.runtime import DockerRuntime
from sandbox.docker.sdk import call
from sandbox.docker.warm import spares_for
from sandbox.errors import EngineUnavailable, UsageError
from sandbox.plugin import (
    BackendOptions,
    DoctorReport,
    Leftovers,
    SandboxBackend,
    TaskFacts,
)
from sandbox.run_tmp import (
    ensure_private_dir,
    fresh_private_dir,
    remove_private_dir,
    run_tmp_dir,
)

logger = logging.getLogger(__name__)


class DockerBackend(SandboxBackend):
    """One container per trial: no network, cap-drop ALL, read-only root, limits, labels."""

    def __init__(self, options: BackendOptions) -> None:
        super().__init__(options)
        config = options.config
        self.tmp_dir = run_tmp_dir(options.run_name)
        if config.expose:
            raise UsageError("expose applies to --sandbox local only (containers see the image)")
        try:
            aliases = parse_aliases(config.base_aliases)
        except ValueError as exc:
            raise UsageError(str(exc)) from None
        try:
            client = connect()
        except EngineUnavailable as exc:
            raise UsageError(str(exc)) from None
        info = call(client.info) if config.runtime or config.agent_root != "never" else {}
        #: What besides the container keeps a root agent off the host.
        self.boundary = second_boundary(config.runtime, info)
        if config.agent_root == "isolated" and self.boundary == "none":
            raise UsageError(isolated_refusal(config.runtime))
        if config.agent_services == "keep" and config.agent_root != "never":
            # Its processes run walled in by Landlock (sandbox.inside.landlock), or not at all.
            refused = landlock_refusal(config.runtime, config.agent_root, info)
            if refused is not None:
                raise UsageError(refused)
        if config.runtime:
            runtimes = info.get("Runtimes") or {}
            if config.runtime not in runtimes:
                raise UsageError(
                    f"--runtime {config.runtime} is not registered with the engine "
                    f"(available: {', '.join(sorted(runtimes)) or 'none'}); "
                    "`bash docker/start-engine.sh` registers runsc when Debian has it"
                )
        self.runtime = DockerRuntime(
            client,
            ImageResolver(
                client,
                aliases=aliases,
                puller=ImagePuller(client, config.pull),
                builder_choice=config.builder,
                force_build=config.force_build,
            ),
            runtime=config.runtime,
            run_label=options.run_name,
            tmp_dir=self.tmp_dir,
            spares=spares_for(options.concurrency),
            compose_host_access=config.compose_host_access,
        )
        self._pinger = pinger(client)
        self._gpu_answers: dict[int, str | None] = {}
        #: The engine's answer to the compose guard's probe network, once asked.
        self._engine_network_answer: tuple[str | None] | None = None
        self._capacity: Capacity | None = None

    @override
    def make_sandbox(self, spec: SandboxSpec) -> DockerSandbox:
        sandbox = DockerSandbox(
            replace(
                spec,
                agent_root=self.options.config.agent_root,
                agent_services=self.options.config.agent_services,
                cpu_policy=self.options.config.cpu_policy,
                memory_policy=self.options.config.memory_policy,
            ),
            self.runtime,
        )
        sandbox.agent_boundary = self.boundary
        return sandbox

    def refuse_addresses(self, addresses: Sequence[str]) -> None:
        """The egress filter refuses these IPv4 addresses in every phase of the next trials.

        IPv6 ones need no rule: the filtered network has no IPv6 (every packet is dropped).
        """
        found = []
        for text in addresses:
            try:
                address = ipaddress.ip_address(text)
            except ValueError:
                continue
            if address.version == 4 and text not in found:
                found.append(str(address))
        self.runtime.egress.cluster = tuple(sorted(found))

    def report_progress(self, report: Callable[[str], None]) -> None:
        """Image pulls and builds say how they are getting on through ``report``."""
        self.runtime.resolver.puller.progress = report
        self.runtime.resolver.progress = report

    def capacity(self) -> Capacity:
        """The engine's CPUs and memory (asked once: the checks ask it task by task)."""
        if self._capacity is None:
            self._capacity = self.runtime.capacity()
        return self._capacity

    def gpu_problem(self, gpus: int) -> str | None:
        """The engine's own answer to a container asking ``gpus`` GPUs, asked once per count.

        A probe container of the base image (labelled with the run) is started with the
        task's device request: an engine without a GPU driver refuses it, before any image
        of the task is built or pulled.
        """
        if gpus not in self._gpu_answers:
            answer = gpu_probe(
                self.runtime.client,
                gpus,
                image=self.runtime.base_image,
                runtime=self.options.config.runtime,
                labels={MANAGED: "1", RUN: self.options.run_name},
            )
            self._gpu_answers[gpus] = (
                None
                if answer is None
                else f"the Docker engine has no GPU for it (its answer: {answer})"
            )
        return self._gpu_answers[gpus]

    @classmethod
    @override
    def doctor(cls, report: DoctorReport) -> None:
        """The engine's facts and each guarantee of the docker sandbox on it (:mod:`.admin`)."""
        admin.doctor(report)

    @classmethod
    @override
    def remove_leftovers(cls, run: str | None) -> Leftovers:
        """The engine's objects with the harness's labels (and failed builds' layers)."""
        return admin.remove_engine_leftovers(run)

    def task_problems(self, tasks: Sequence[TaskFacts]) -> list[str]:
        """The base checks, and compose tasks where the host cannot be shielded from them.

        A compose network is kept off the host's own services by host firewall rules
        where the harness filters on the engine's host (:mod:`sandbox.docker.hostguard`),
        and by how the engine makes it wherever trials are filtered in their own
        namespaces (:mod:`sandbox.docker.compose`, whose sidecars then get no internet:
        said once). Where neither holds such a task is refused before the run, unless
        ``sandbox.compose_host_access = "allow"``.
        """
        problems = super().task_problems(tasks)
        self._warn_unused_aliases(tasks)
        line = announcement(tasks, self.options.config.agent_root, self.boundary)
        if line is not None and line not in self.warnings:
            self.warnings.append(line)
        gaps = engine_gaps(self.runtime.engine_info())
        if gaps and tasks:
            line = gap_line(gaps, required=self.options.config.require_limits)
            if self.options.config.require_limits:
                problems.append(line)
            elif line not in self.warnings:
                self.warnings.append(line)
        if self.options.config.compose_host_access == "allow":
            return problems
        if not self.runtime.host_filter():
            compose = [task for task in tasks if task.compose_file is not None]
            engine = self._engine_network_problem() if compose else None
            if engine is not None:
                why = f"{hostguard.problem(self.runtime.client)}, and {engine}"
                problems += [f"{t.compose_file}: {hostguard.refusal(why)}" for t in compose]
            elif compose:
                line = (
                    "compose sidecars run on a network the engine makes without a host "
                    "address and without the internet (no root on the engine's host to "
                    "filter them there), each in a namespace whose rules let it reach its "
                    "peers only; the agent's own phases keep their policies"
                )
                if line not in self.warnings:
                    self.warnings.append(line)
            return problems
        for task in tasks:
            if task.compose_file is None:
                continue
            reason = hostguard.problem(self.runtime.client)
            if reason is not None:
                problems.append(f"{task.compose_file}: {hostguard.refusal(reason)}")
        return problems

    def _engine_network_problem(self) -> str | None:
        """:func:`engine_network_problem`, asked once per backend: it makes a probe network.

        ``--skip-invalid`` and ``tasks check`` ask :meth:`task_problems` one task at a time.
        """
        if self._engine_network_answer is None:
            self._engine_network_answer = (engine_network_problem(self.runtime.client),)
        return self._engine_network_answer[0]

    def _warn_unused_aliases(self, tasks: Sequence[TaskFacts]) -> None:
        """One warning naming each ``--base-alias`` that no image of the run's tasks matches."""
        aliases = self.runtime.resolver.aliases
        if not aliases:
            return
        use = AliasUse(dict(aliases))
        for task in tasks:
            mark_task_images(
                use,
                image=task.docker_image,
                dockerfile=task.dockerfile,
                force_build=self.runtime.resolver.force_build,
                compose_file=task.compose_file,
            )
        warning = use.warning()
        if warning is not None and warning not in self.warnings:
            self.warnings.append(warning)

    def health(self) -> str | None:
        """None while the Docker engine answers a ping (5 s at most), else why not."""
        return ping(self._pinger)

    def engine_address(self) -> str:
        """``DOCKER_HOST``, else the default unix socket."""
        return engine_address()

    def outage_error(self, message: str) -> bool:
        """The engine's own failures: it did not answer (its socket), its database closed.

        Told from the SDK seam's typed error (:class:`~sandbox.docker.sdk.EngineUnreachable`),
        not from "connection refused" in a message: a registry's is the image's failure.
        """
        return engine_failure(message)

    def start(self) -> list[str]:
        """Remove every object labelled with the run and the run's temp dir's leftovers."""
        return self._remove_labelled() + fresh_private_dir(self.tmp_dir)

    def attach(self) -> None:
        """Create the run's temp dir if no other process of the run has."""
        ensure_private_dir(self.tmp_dir)

    def release(self) -> None:
        """Remove this instance's staged supervisor copy (the run's containers stay)."""
        self.runtime.release()

    def abort(self) -> list[str]:
        """Remove the run's containers and volumes now."""
        return self._remove_labelled()

    def close(self) -> CloseReport:
        """Remove what the run leaked (by label), then its temp dir."""
        report = self.runtime.close()
        report.removed += remove_private_dir(self.tmp_dir)
        return report

    def _remove_labelled(self) -> list[str]:
        report = remove_leaks(self.runtime.client, run=self.options.run_name)
        for error in report.errors:  # as the local backend's start says its own
            logger.warning("could not remove: %s", error)
        return report.removed


__all__ = ["DockerBackend"]
