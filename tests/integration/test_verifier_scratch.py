"""The scratch-dir contract of ``Sandbox.run_phase`` on every backend (``sandbox.scratch``).

Real sandboxes, real phases: local (as root), docker with the trial's storage on the host,
docker without it (as with a remote engine), and gVisor. The agent leaves a note, a link
named like a verifier's scratch file and (gVisor keeps these in the sandbox, not on the
host's disk) a FIFO in ``/tmp``; the verifier then reports what it sees and writes through
the link's name; a healthcheck-like phase (``shared_tmp``) and the next agent phase report
theirs. Judged by the verifier dir's content, read from outside with ``read_file``.
"""

from __future__ import annotations

import json
import secrets
import shutil
import sys
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from support.workers import uid_base

from sandbox.backend import PhaseRequest, Role, Sandbox, SandboxSpec
from sandbox.environment import FIXED_PATH
from sandbox.local.sandbox import IdentityPool, LocalSandbox

#: A uid range of its own (conftest: 61000+, conformance: 61100+, python agent: 61300+).
UID_BASE = uid_base(61500)
SYSTEM_PYTHON = shutil.which("python3", path=FIXED_PATH) or sys.executable

PLANT = (
    'echo agent > /tmp/note; ln -s "$VD/reward.json" /tmp/result.json; mkfifo /tmp/pipe; '
    "echo agent > /var/tmp/note; echo agent > /dev/shm/note"
)
#: What a phase sees in the scratch dirs, as one JSON line on stdout.
LOOK = (
    "python3 -c 'import json, os; print(json.dumps({d: [sorted(os.listdir(d)), "
    "oct(os.stat(d).st_mode & 0o7777), os.stat(d).st_uid == os.getuid()] "
    'for d in ("/tmp", "/var/tmp", "/dev/shm")}))\''
)
GRADE = (
    f'{LOOK} > "$VD/seen.json"; echo 0 > "$VD/reward.txt"; '
    "echo '{\"reward\": 1}' > /tmp/result.json; echo verifier > /tmp/verifier-note"
)

Make = Callable[[], Sandbox]


def _docker(runtime_name: str | None, host_storage: bool) -> Callable[[], Any]:
    def make_runtime() -> Any:
        from support.docker import docker_client, require_image, unavailable

        from sandbox.docker.images import ImageResolver
        from sandbox.docker.runtime import DockerRuntime

        client = docker_client()
        require_image(client)
        if runtime_name and runtime_name not in (client.info().get("Runtimes") or {}):
            unavailable(f"runtime {runtime_name} is not registered")
        return DockerRuntime(
            client,
            ImageResolver(client),
            runtime=runtime_name,
            run_label=f"scratch-{secrets.token_hex(4)}",
            host_storage=host_storage,
        )

    return make_runtime


BACKENDS = {
    "local": (None, [pytest.mark.root]),
    "docker": (_docker(None, True), [pytest.mark.docker]),
    "docker-no-host-storage": (_docker(None, False), [pytest.mark.docker]),
    "runsc": (_docker("runsc", True), [pytest.mark.docker]),
}


@pytest.fixture(
    params=[pytest.param(name, marks=marks, id=name) for name, (_f, marks) in BACKENDS.items()]
)
def make(request: pytest.FixtureRequest) -> Iterator[tuple[str, Make]]:
    """A started sandbox of the backend (stopped, its runtime closed, at teardown)."""
    made: list[Sandbox] = []
    runtime: Any = None
    factory = BACKENDS[request.param][0]

    def build() -> Sandbox:
        nonlocal runtime
        spec = SandboxSpec(trial_id=f"scratch-{secrets.token_hex(4)}")
        if factory is None:
            pool = IdentityPool(UID_BASE, UID_BASE)
            sandbox: Sandbox = LocalSandbox(spec, identities=pool, python=SYSTEM_PYTHON)
        else:
            from sandbox.docker.backend import DockerSandbox

            runtime = runtime or factory()
            sandbox = DockerSandbox(spec, runtime)
        made.append(sandbox)
        sandbox.start()
        return sandbox

    yield request.param, build
    for sandbox in made:
        sandbox.stop()
    if runtime is not None:
        runtime.close()


def _phase(sandbox: Sandbox, role: Role, script: str, **more: Any) -> str:
    env = {"PATH": FIXED_PATH, "VD": sandbox.paths.verifier}
    result = sandbox.run_phase(
        PhaseRequest(role=role, argv=["bash", "-c", script], env=env, timeout_sec=30, **more)
    )
    assert result.error is None and result.exit_code == 0, result
    name = more.get("log_name") or role
    data, event = sandbox.read_file(f"{sandbox.paths.logs}/{name}.stdout", max_bytes=1 << 16)
    assert event is None and data is not None, event
    return data.decode()


def _read(sandbox: Sandbox, name: str) -> str | None:
    data, _event = sandbox.read_file(f"{sandbox.paths.verifier}/{name}", max_bytes=1 << 16)
    return None if data is None else data.decode()


def test_a_verifier_phase_gets_scratch_dirs_of_its_own(make: tuple[str, Make]) -> None:
    backend, build = make
    sandbox = build()
    sandbox.reset_verifier_dir()
    _phase(sandbox, "agent", PLANT)
    shared = json.loads(_phase(sandbox, "verifier", LOOK, shared_tmp=True, log_name="check"))
    assert "note" in shared["/tmp"][0] and "result.json" in shared["/tmp"][0], shared
    _phase(sandbox, "verifier", GRADE)
    # From outside: the write through /tmp/result.json stayed in the verifier's /tmp.
    assert _read(sandbox, "reward.json") is None
    assert (_read(sandbox, "reward.txt") or "").strip() == "0"
    seen = json.loads(_read(sandbox, "seen.json") or "{}")
    # Docker: the image (Debian) has apt's _apt user, whose group may write (not the agent).
    private = "0o755" if backend == "local" else "0o1775"
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        assert seen[d] == [[], private, True], seen
    after = json.loads(_phase(sandbox, "agent", LOOK))
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        entries, mode, _mine = after[d]
        assert mode == "0o1777" and "verifier-note" not in entries, after
        if backend == "docker-no-host-storage":
            assert entries == [], after  # nothing to park them on: emptied (docs/grading.md)
        else:
            assert "note" in entries, after
    if backend not in ("docker-no-host-storage", "runsc"):  # a FIFO lives in gVisor's sentry
        assert "pipe" in after["/tmp"][0], after
