"""The Sandbox contract, run against every backend in ``BACKENDS``.

To add a backend, add one line to ``BACKENDS`` (name → factory(spec) → Sandbox), e.g.
``"docker": lambda spec: DockerSandbox(spec, image="python:3.12-slim")``. Tests read and
write only through the ``Sandbox`` interface plus host-side observation (``/proc``), so
they hold for containers too; the one host-path check (``_host_root``) is local-only.
"""

from __future__ import annotations

import hashlib
import os
import secrets
import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from support.workers import uid_base

from sandbox.backend import PhaseRequest, PhaseResult, Sandbox, SandboxSpec
from sandbox.environment import FIXED_PATH
from sandbox.errors import SandboxError
from sandbox.local import IdentityPool, LocalSandbox

SYSTEM_PYTHON = shutil.which("python3", path=FIXED_PATH) or sys.executable
#: A uid range of its own (tests/conftest.py uses 61000+), so sweeps never collide.
CONFORMANCE_UID_BASE = uid_base(61100)
_LOCAL_POOL = IdentityPool(CONFORMANCE_UID_BASE, CONFORMANCE_UID_BASE)

_DOCKER_RUNTIME: list[Any] = []


def _docker_sandbox(spec: SandboxSpec) -> Sandbox:
    """A DockerSandbox on a runtime shared by the session (skips/fails without an engine)."""
    from support.docker import docker_client, require_image

    from sandbox.docker.backend import DockerSandbox
    from sandbox.docker.images import ImageResolver
    from sandbox.docker.runtime import DockerRuntime

    client = docker_client()
    require_image(client)
    if not _DOCKER_RUNTIME:
        # A label of this process's: closing removes every object of the label, which
        # must never be another pytest worker's sandbox still in use (``pytest -n``).
        label = f"conformance-{os.getpid()}"
        runtime = DockerRuntime(client, ImageResolver(client), run_label=label)
        _DOCKER_RUNTIME.append(runtime)
    return DockerSandbox(spec, _DOCKER_RUNTIME[0])


@pytest.fixture(scope="module", autouse=True)
def _close_docker_runtime() -> Iterator[None]:
    """The shared docker runtime's staged supervisor copy goes away with the module."""
    yield
    while _DOCKER_RUNTIME:
        _DOCKER_RUNTIME.pop().close()


BACKENDS: dict[str, Callable[[SandboxSpec], Sandbox]] = {
    "local": lambda spec: LocalSandbox(spec, identities=_LOCAL_POOL, python=SYSTEM_PYTHON),
    "docker": _docker_sandbox,
}

MakeSandbox = Callable[..., Sandbox]


@pytest.fixture(params=sorted(BACKENDS))
def backend_factory(request: pytest.FixtureRequest) -> Iterator[MakeSandbox]:
    """Build sandboxes of one backend; every one is stopped at teardown."""
    made: list[Sandbox] = []

    def make(spec: SandboxSpec | None = None, *, start: bool = True, **fields: Any) -> Sandbox:
        spec = spec or SandboxSpec(trial_id=f"conf-{secrets.token_hex(4)}", **fields)
        sandbox = BACKENDS[request.param](spec)
        made.append(sandbox)
        if start:
            sandbox.start()
        return sandbox

    yield make
    for sandbox in made:
        sandbox.stop()
    leaked = [
        p.info
        for p in psutil.process_iter(["pid", "uids", "status", "cmdline"])
        if p.info["uids"]
        and CONFORMANCE_UID_BASE <= p.info["uids"].real < CONFORMANCE_UID_BASE + 16
        and p.info["status"] != psutil.STATUS_ZOMBIE
    ]
    assert leaked == [], "sandbox processes outlived stop()"


def _host_root(sandbox: Sandbox) -> Path | None:
    """The trial root as a host path, for backends that keep one on the host."""
    if sandbox.backend != "local":
        return None
    try:
        return Path(sandbox.paths.root)
    except SandboxError:
        return None


def run(sandbox: Sandbox, script: str, **request: Any) -> PhaseResult:
    request.setdefault("timeout_sec", 20)
    env = {"PATH": FIXED_PATH, **request.pop("env", {})}
    return sandbox.run_phase(
        PhaseRequest(
            role=request.pop("role", "agent"), argv=["bash", "-c", script], env=env, **request
        )
    )


def stdout_of(sandbox: Sandbox, role: str = "agent") -> bytes:
    data, event = sandbox.read_file(f"{sandbox.paths.logs}/{role}.stdout", max_bytes=1 << 20)
    assert event is None, event
    assert data is not None
    return data


def procs_with(token: str) -> list[psutil.Process]:
    return [
        p
        for p in psutil.process_iter(["cmdline", "status"])
        if p.info["status"] != psutil.STATUS_ZOMBIE and token in " ".join(p.info["cmdline"] or [])
    ]


# -- lifecycle --------------------------------------------------------------------------------


def test_start_stop_is_idempotent_and_leaves_no_root(backend_factory: MakeSandbox) -> None:
    sandbox = backend_factory()
    root = _host_root(sandbox)
    assert run(sandbox, "echo alive").exit_code == 0
    sandbox.stop()
    sandbox.stop()
    if root is not None:
        assert not root.exists()


def test_stop_before_start_is_safe(backend_factory: MakeSandbox) -> None:
    sandbox = backend_factory(start=False)
    sandbox.stop()
    sandbox.stop()


def test_stop_after_a_failed_start_is_safe_and_leaves_nothing(
    backend_factory: MakeSandbox,
) -> None:
    sandbox = backend_factory(start=False, fixtures={"../escape.txt": b"x"})
    with pytest.raises(SandboxError):
        sandbox.start()
    root = _host_root(sandbox)
    sandbox.stop()
    sandbox.stop()
    if root is not None:
        assert not root.exists()


def test_workspace_is_seeded_from_fixtures(backend_factory: MakeSandbox) -> None:
    sandbox = backend_factory(
        fixtures={"src/app.py": b"print(1)\n", "run.sh": (b"exit 0\n", 0o755)}
    )
    data, event = sandbox.read_file(f"{sandbox.paths.workspace}/src/app.py", max_bytes=100)
    assert (data, event) == (b"print(1)\n", None)
    assert run(sandbox, "test -x run.sh && ./run.sh").exit_code == 0


# -- files in and out -------------------------------------------------------------------------


def test_put_file_put_dir_read_file_round_trip(
    backend_factory: MakeSandbox, tmp_path: Path
) -> None:
    sandbox = backend_factory()
    blob = bytes(range(256)) * 64
    sandbox.put_file(f"{sandbox.paths.root}/inbox/blob.bin", blob, agent_readable=True)
    assert sandbox.read_file(f"{sandbox.paths.root}/inbox/blob.bin", max_bytes=1 << 20) == (
        blob,
        None,
    )
    src = tmp_path / "tests"
    (src / "sub").mkdir(parents=True)
    (src / "test.sh").write_text("#!/bin/bash\nexit 0\n")
    (src / "test.sh").chmod(0o755)
    (src / "sub" / "data.txt").write_text("d")
    sandbox.put_dir(src, sandbox.paths.tests, agent_readable=False)
    assert sandbox.read_file(f"{sandbox.paths.tests}/sub/data.txt", max_bytes=10) == (b"d", None)
    # The verifier (grader) can run what put_dir installed.
    result = run(
        sandbox,
        f"bash {sandbox.paths.tests}/test.sh && test -x {sandbox.paths.tests}/test.sh",
        role="verifier",
    )
    assert result.exit_code == 0
    data, event = sandbox.read_file(f"{sandbox.paths.tests}/sub/data.txt", max_bytes=0)
    assert data is None and event is not None and event.kind == "too_large"


def test_put_dir_replaces_the_previous_content(
    backend_factory: MakeSandbox, tmp_path: Path
) -> None:
    sandbox = backend_factory()
    for name in ("old", "new"):
        src = tmp_path / name
        src.mkdir()
        (src / f"{name}.txt").write_text(name)
        sandbox.put_dir(src, sandbox.paths.tests, agent_readable=False)
    assert sandbox.read_file(f"{sandbox.paths.tests}/new.txt", max_bytes=10) == (b"new", None)
    _, event = sandbox.read_file(f"{sandbox.paths.tests}/old.txt", max_bytes=10)
    assert event is not None and event.kind == "missing"


@pytest.mark.root
def test_agent_cannot_read_what_is_not_agent_readable(
    backend_factory: MakeSandbox, tmp_path: Path, canary: str
) -> None:
    sandbox = backend_factory()
    src = tmp_path / "tests"
    src.mkdir()
    (src / "test.sh").write_text(canary)
    sandbox.put_dir(src, sandbox.paths.tests, agent_readable=False)
    sandbox.put_file(f"{sandbox.paths.root}/readable.txt", b"public", agent_readable=True)
    script = f"cat {sandbox.paths.tests}/test.sh; cat {sandbox.paths.root}/readable.txt; true"
    result = run(sandbox, script)
    # Either the posture self-check refuses the phase or the read fails: never a leak.
    out = stdout_of(sandbox) if result.error is None else b""
    assert canary.encode() not in out
    if result.error is None:
        assert b"public" in out


def test_read_file_refuses_paths_outside_the_root(backend_factory: MakeSandbox) -> None:
    sandbox = backend_factory()
    with pytest.raises((SandboxError, ValueError)):
        sandbox.read_file(f"{sandbox.paths.workspace}/../../../etc/passwd", max_bytes=1 << 20)


# -- phases -----------------------------------------------------------------------------------


@pytest.mark.parametrize("code", [0, 1, 3, 127])
def test_exit_codes_are_reported(backend_factory: MakeSandbox, code: int) -> None:
    sandbox = backend_factory()
    result = run(sandbox, f"exit {code}")
    assert (result.exit_code, result.signal, result.timed_out, result.error) == (
        code,
        None,
        False,
        None,
    )


def test_signal_death_is_reported(backend_factory: MakeSandbox) -> None:
    result = run(backend_factory(), "kill -TERM $$")
    assert (result.exit_code, result.signal) == (None, 15)


def test_stdin_is_delivered_in_full(backend_factory: MakeSandbox) -> None:
    sandbox = backend_factory()
    payload = "line one\n" + "x" * 300_000 + "\nlast"
    result = run(sandbox, "sha256sum", stdin=payload)
    assert result.exit_code == 0
    assert stdout_of(sandbox).split()[0].decode() == hashlib.sha256(payload.encode()).hexdigest()


def test_stdin_is_empty_when_not_given(backend_factory: MakeSandbox) -> None:
    sandbox = backend_factory()
    result = run(sandbox, "wc -c", timeout_sec=10)
    assert not result.timed_out
    assert stdout_of(sandbox).strip() == b"0"


def test_env_is_delivered_exactly(backend_factory: MakeSandbox) -> None:
    sandbox = backend_factory()
    result = run(sandbox, "env -0", env={"FOO": "bar baz", "EMPTY": "", "UNICODE": "é✓"})
    assert result.exit_code == 0
    env = dict(
        item.split("=", 1) for item in stdout_of(sandbox).decode().split("\0") if "=" in item
    )
    assert env["FOO"] == "bar baz" and env["EMPTY"] == "" and env["UNICODE"] == "é✓"
    assert env["PATH"] == FIXED_PATH


def test_secret_env_reaches_the_process_but_never_argv(
    backend_factory: MakeSandbox, canary: str
) -> None:
    sandbox = backend_factory()
    box: dict[str, PhaseResult] = {}
    gate = f"gate-{secrets.token_hex(4)}"
    # Written whole, then renamed: the test reads the file as soon as it exists.
    script = (
        'printf %s "$GATEWAY_TOKEN" > secret_seen.part && mv secret_seen.part secret_seen; '
        f"while [ ! -e {gate} ]; do sleep 0.02; done"
    )
    thread = threading.Thread(
        target=lambda: box.setdefault(
            "r", run(sandbox, script, secret_env={"GATEWAY_TOKEN": canary}, timeout_sec=30)
        )
    )
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while sandbox.read_file(f"{sandbox.paths.workspace}/secret_seen", max_bytes=200)[0] is None:
            assert time.monotonic() < deadline, "the agent never started"
            time.sleep(0.02)
        seen, _ = sandbox.read_file(f"{sandbox.paths.workspace}/secret_seen", max_bytes=200)
        assert seen == canary.encode()
        in_argv = [
            p.info
            for p in psutil.process_iter(["pid", "cmdline"])
            if canary in " ".join(p.info["cmdline"] or [])
        ]
        assert in_argv == []
        # The supervisor itself got it on stdin, not in its environment.
        for p in psutil.process_iter(["pid", "cmdline"]):
            if "supervisor.py" in " ".join(p.info["cmdline"] or []):
                try:
                    environ = Path(f"/proc/{p.info['pid']}/environ").read_bytes()
                except OSError:
                    continue
                assert canary.encode() not in environ
    finally:
        sandbox.put_file(f"{sandbox.paths.workspace}/{gate}", b"", agent_readable=True)
        thread.join(30)
    assert box["r"].exit_code == 0
    assert canary.encode() not in stdout_of(sandbox)


def test_cwd_defaults_to_the_workspace(backend_factory: MakeSandbox) -> None:
    sandbox = backend_factory()
    assert run(sandbox, "pwd").exit_code == 0
    assert stdout_of(sandbox).decode().strip() == sandbox.paths.workspace
    other = sandbox.paths.home
    assert run(sandbox, "pwd", cwd=other).exit_code == 0
    assert stdout_of(sandbox).decode().strip() == other


def test_timeout_kills_the_whole_tree(backend_factory: MakeSandbox) -> None:
    sandbox = backend_factory()
    token = f"1{secrets.randbelow(10**6)}.875"
    began = time.monotonic()
    result = run(sandbox, f"sleep {token} & setsid sleep {token} & sleep {token}", timeout_sec=1)
    # The sleeps would run for more than a day: a phase back within minutes was not waited
    # out (the bound leaves a loaded machine room to start and tear down the phase).
    assert time.monotonic() - began < 300
    assert procs_with(token) == []
    assert result.error is None, result.error
    assert result.timed_out
    assert result.exit_code is None


def test_background_processes_die_with_the_phase(backend_factory: MakeSandbox) -> None:
    sandbox = backend_factory()
    token = f"1{secrets.randbelow(10**6)}.9375"
    result = run(sandbox, f"( ( sleep {token} & ) & ); setsid sleep {token} & sleep 0.3")
    assert result.exit_code == 0
    assert procs_with(token) == []
    assert result.survivors


def test_output_is_capped(backend_factory: MakeSandbox) -> None:
    sandbox = backend_factory()
    result = run(sandbox, "head -c 3000000 /dev/zero", max_output_bytes=100_000)
    assert result.exit_code == 0 and result.output_truncated
    assert result.stdout_bytes == 3_000_000
    data, event = sandbox.read_file(f"{sandbox.paths.logs}/agent.stdout", max_bytes=1 << 22)
    assert event is None and data is not None and len(data) == 100_000


# -- verifier dir and evidence ---------------------------------------------------------------


@pytest.mark.root
def test_reset_verifier_dir_empties_it_and_the_agent_cannot_write_it(
    backend_factory: MakeSandbox,
) -> None:
    sandbox = backend_factory()
    verifier = sandbox.paths.verifier
    # Before the dir even exists, the agent cannot create it (or pre-plant a reward).
    run(sandbox, f"mkdir -p {verifier}; echo 1 > {verifier}/reward.txt; true")
    sandbox.reset_verifier_dir()
    _, event = sandbox.read_file(f"{verifier}/reward.txt", max_bytes=100)
    assert event is not None and event.kind == "missing"
    sandbox.put_file(f"{verifier}/stale.txt", b"old", agent_readable=True)
    sandbox.reset_verifier_dir()
    _, event = sandbox.read_file(f"{verifier}/stale.txt", max_bytes=100)
    assert event is not None and event.kind == "missing"
    result = run(
        sandbox,
        f"echo 1 > {verifier}/reward.txt; ln -s /etc/passwd {verifier}/reward.json;"
        f" mkdir {verifier}/x; true",
    )
    # A backend may also refuse the phase outright (the local posture self-check does,
    # because the verifier dir is on its unreadable list): either way nothing is planted.
    assert result.error is None or result.error["type"] == "PostureError", result.error
    for name in ("reward.txt", "reward.json", "x"):
        _, event = sandbox.read_file(f"{verifier}/{name}", max_bytes=100)
        assert event is not None and event.kind == "missing", name
    # The grader can write it.
    assert run(sandbox, f"echo 0.5 > {verifier}/reward.txt", role="verifier").exit_code == 0
    assert sandbox.read_file(f"{verifier}/reward.txt", max_bytes=100) == (b"0.5\n", None)


def test_copy_out_refuses_symlinks_and_fifos(
    backend_factory: MakeSandbox, tmp_path: Path, outside_dir: Path, canary: str
) -> None:
    (outside_dir / "canary.txt").write_text(canary)
    (outside_dir / "canary.txt").chmod(0o644)
    sandbox = backend_factory()
    script = (
        f"echo fine > ok.txt; ln -s {outside_dir}/canary.txt leak.txt;"
        f" ln -s {outside_dir} leakdir; mkfifo pipe; mkdir -p sess;"
        f" ln -s {outside_dir}/canary.txt sess/transcript.jsonl"
    )
    assert run(sandbox, script).exit_code == 0
    dest = tmp_path / "evidence"
    events = sandbox.copy_out(
        sandbox.paths.workspace, dest, max_file_bytes=1 << 20, max_total_bytes=1 << 20
    )
    kinds = {e.path.rsplit("/", 1)[-1]: e.kind for e in events}
    assert kinds.get("leak.txt") == "symlink"
    assert kinds.get("leakdir") == "symlink"
    assert kinds.get("pipe") == "fifo"
    assert kinds.get("transcript.jsonl") == "symlink"
    assert (dest / "ok.txt").read_text() == "fine\n"
    copied = b"".join(p.read_bytes() for p in dest.rglob("*") if p.is_file() and not p.is_symlink())
    assert canary.encode() not in copied
    single = tmp_path / "single.txt"
    events = sandbox.copy_out(
        f"{sandbox.paths.workspace}/leak.txt",
        single,
        max_file_bytes=1 << 20,
        max_total_bytes=1 << 20,
    )
    assert [e.kind for e in events] == ["symlink"]
    assert not single.exists()
    data, event = sandbox.read_file(
        f"{sandbox.paths.workspace}/sess/transcript.jsonl", max_bytes=1 << 20
    )
    assert data is None and event is not None and event.kind == "symlink"
