"""The checks every ``Sandbox`` backend passes, as a pytest base class to subclass.

A check reads and writes only through the :class:`~sandbox.backend.Sandbox` interface, plus
two observations of the processes a sandbox runs (:meth:`SandboxContract.visible_processes`,
:meth:`SandboxContract.process_environ`), by default the host's ``/proc``: right for every
backend whose processes run on the test's kernel (local, docker with runc); a backend whose
processes run elsewhere overrides them. What only one backend can observe (the local
backend's trial root on the host) belongs in that backend's own test module.

A backend declares what it legitimately cannot do in
:attr:`SandboxContract.limitations` (one entry of :data:`LIMITATIONS` with its reason):
the checks that need it are then not collected for that backend, and
``test_declared_limitations_hold`` checks in their place that the backend really cannot.
Nothing else is ever skipped, but through :meth:`SandboxContract.prerequisite_missing`
(the test machine lacks something the backend needs: root, an engine).
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, ClassVar, Literal, NoReturn, Protocol, TypeVar

import psutil
import pytest

from sandbox.backend import PhaseRequest, PhaseResult, Sandbox, SandboxSpec
from sandbox.environment import FIXED_PATH
from sandbox.errors import SandboxError

#: What a backend may declare it cannot do (:attr:`SandboxContract.limitations`).
Limitation = Literal["commands"]
#: Each limitation, as what the backend then does not do.
LIMITATIONS: Mapping[Limitation, str] = {
    "commands": "runs no command: a phase's result is not a process's (a test double)",
}

_Check = TypeVar("_Check", bound=Callable[..., None])
_NEEDS = "_contract_needs"


def _needs(limitation: Limitation) -> Callable[[_Check], _Check]:
    """Mark a check as needing what a backend may declare it cannot do."""

    def mark(check: _Check) -> _Check:
        setattr(check, _NEEDS, limitation)
        return check

    return mark


class SandboxFactory(Protocol):
    """Makes (and by default starts) one sandbox of the backend under test.

    ``fields`` are :class:`~sandbox.backend.SandboxSpec` fields for a fresh spec.
    """

    def __call__(
        self, spec: SandboxSpec | None = None, *, start: bool = True, **fields: Any
    ) -> Sandbox:
        """A sandbox for ``spec`` (else a fresh spec of ``fields``), started unless told not."""
        ...


def run(sandbox: Sandbox, script: str, **request: Any) -> PhaseResult:
    """Run ``bash -c script`` as one phase (the agent's unless ``role`` says otherwise)."""
    request.setdefault("timeout_sec", 20)
    env = {"PATH": FIXED_PATH, **request.pop("env", {})}
    return sandbox.run_phase(
        PhaseRequest(
            role=request.pop("role", "agent"), argv=["bash", "-c", script], env=env, **request
        )
    )


def stdout_of(sandbox: Sandbox, role: str = "agent") -> bytes:
    """The captured standard output of the last phase of ``role``."""
    data, event = sandbox.read_file(f"{sandbox.paths.logs}/{role}.stdout", max_bytes=1 << 20)
    assert event is None, event
    assert data is not None
    return data


def _canary() -> str:
    return f"CANARY-{secrets.token_hex(16)}"


class SandboxContract(ABC):
    """The Sandbox contract: subclass it as ``Test<Backend>`` in a backend's test module.

    Implement :meth:`make_sandbox`; override the other hooks where the defaults do not fit.
    """

    #: What this backend cannot do, each with why (keys from :data:`LIMITATIONS`).
    limitations: ClassVar[Mapping[Limitation, str]] = {}

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        unknown = set(cls.limitations) - set(LIMITATIONS)
        if unknown:
            raise TypeError(
                f"{cls.__name__} declares unknown limitations {sorted(unknown)}; "
                f"the kit knows {sorted(LIMITATIONS)}"
            )
        unexplained = sorted(name for name, why in cls.limitations.items() if not why.strip())
        if unexplained:
            raise TypeError(f"{cls.__name__} declares {unexplained} without saying why")
        for name in [name for name in dir(cls) if name.startswith("test_")]:
            if getattr(getattr(cls, name), _NEEDS, None) in cls.limitations:
                setattr(cls, name, None)  # not collected: the backend said it cannot

    # -- hooks ----------------------------------------------------------------------------

    @abstractmethod
    def make_sandbox(self, spec: SandboxSpec) -> Sandbox:
        """A new, not yet started sandbox of the backend under test for ``spec``."""

    def prerequisite_missing(self, reason: str) -> NoReturn:
        """End the current check: the test machine lacks ``reason`` (default: a skip).

        A project whose CI must have every prerequisite makes this fail there.
        """
        pytest.skip(reason)

    def agent_separation_missing(self) -> str | None:
        """Why the agent cannot be kept from root-owned files here, or None (default).

        E.g. the local backend drops privileges only when the tests run as root.
        """
        return None

    def after_stop(self, sandboxes: list[Sandbox]) -> None:  # noqa: B027 - optional hook
        """Observe, after a check stopped them, that ``sandboxes`` left nothing running."""

    def visible_processes(self) -> list[tuple[int, str]]:
        """Every live process the sandbox's could be among: (pid, command line)."""
        found = []
        for proc in psutil.process_iter(["pid", "cmdline", "status"]):
            if proc.info["status"] != psutil.STATUS_ZOMBIE:
                found.append((proc.info["pid"], " ".join(proc.info["cmdline"] or [])))
        return found

    def process_environ(self, pid: int) -> bytes | None:
        """The environment block of process ``pid`` (None when it cannot be read)."""
        try:
            return Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            return None

    # -- fixtures -------------------------------------------------------------------------

    @pytest.fixture
    def sandbox_factory(self) -> Iterator[SandboxFactory]:
        """Make sandboxes of the backend; every one is stopped (and observed) afterwards."""
        made: list[Sandbox] = []

        def make(spec: SandboxSpec | None = None, *, start: bool = True, **fields: Any) -> Sandbox:
            spec = spec or SandboxSpec(trial_id=f"conf-{secrets.token_hex(4)}", **fields)
            sandbox = self.make_sandbox(spec)
            made.append(sandbox)
            if start:
                sandbox.start()
            return sandbox

        yield make
        for sandbox in made:
            sandbox.stop()
        self.after_stop(made)

    @pytest.fixture
    def bait_dir(self) -> Iterator[Path]:
        """A world-readable host dir outside any trial root, for links to point at."""
        import shutil
        import tempfile

        path = Path(tempfile.mkdtemp(prefix="harness-contract-bait-"))
        path.chmod(0o755)
        yield path
        shutil.rmtree(path, ignore_errors=True)

    def _procs_with(self, token: str) -> list[tuple[int, str]]:
        return [(pid, cmd) for pid, cmd in self.visible_processes() if token in cmd]

    def _require_agent_separation(self) -> None:
        reason = self.agent_separation_missing()
        if reason is not None:
            self.prerequisite_missing(reason)

    # -- the declarations -----------------------------------------------------------------

    def test_declared_limitations_hold(self, sandbox_factory: SandboxFactory) -> None:
        """Each declared limitation is real: a backend that says it runs no command runs none."""
        if "commands" in self.limitations:
            sandbox = sandbox_factory()
            marker = f"{sandbox.paths.workspace}/ran-{secrets.token_hex(4)}"
            run(sandbox, f"echo ran > {marker}")
            _, event = sandbox.read_file(marker, max_bytes=100)
            assert event is not None and event.kind == "missing", (
                "the backend declares it runs no command, yet the phase's command ran"
            )

    # -- lifecycle ------------------------------------------------------------------------

    def test_start_stop_is_idempotent(self, sandbox_factory: SandboxFactory) -> None:
        """A started sandbox serves its files; ``stop`` may be called twice."""
        sandbox = sandbox_factory(fixtures={"seed.txt": b"seed"})
        assert sandbox.read_file(f"{sandbox.paths.workspace}/seed.txt", max_bytes=10) == (
            b"seed",
            None,
        )
        sandbox.stop()
        sandbox.stop()

    @_needs("commands")
    def test_a_phase_runs_and_stop_is_idempotent(self, sandbox_factory: SandboxFactory) -> None:
        """A phase runs in a started sandbox; ``stop`` after it may be called twice."""
        sandbox = sandbox_factory()
        assert run(sandbox, "echo alive").exit_code == 0
        assert stdout_of(sandbox) == b"alive\n"
        sandbox.stop()
        sandbox.stop()

    def test_stop_before_start_is_safe(self, sandbox_factory: SandboxFactory) -> None:
        """``stop`` of a sandbox never started does nothing, twice."""
        sandbox = sandbox_factory(start=False)
        sandbox.stop()
        sandbox.stop()

    def test_stop_after_a_failed_start_is_safe(self, sandbox_factory: SandboxFactory) -> None:
        """A fixture escaping the workspace fails ``start`` (SandboxError); ``stop`` is safe."""
        sandbox = sandbox_factory(start=False, fixtures={"../escape.txt": b"x"})
        with pytest.raises(SandboxError):
            sandbox.start()
        sandbox.stop()
        sandbox.stop()

    def test_paths_are_distinct_absolute_paths(self, sandbox_factory: SandboxFactory) -> None:
        """The trial's paths are absolute and no two are the same."""
        paths = sandbox_factory().paths
        named = [
            paths.root,
            paths.workspace,
            paths.home,
            paths.session,
            paths.verifier,
            paths.tests,
            paths.solution,
            paths.instruction,
            paths.logs,
            paths.grader_home,
        ]
        assert all(path.startswith("/") for path in named), named
        assert len(set(named)) == len(named), named

    def test_workspace_is_seeded_from_fixtures(self, sandbox_factory: SandboxFactory) -> None:
        """``start`` writes the spec's fixtures into the workspace, byte for byte."""
        sandbox = sandbox_factory(
            fixtures={"src/app.py": b"print(1)\n", "run.sh": (b"exit 0\n", 0o755)}
        )
        data, event = sandbox.read_file(f"{sandbox.paths.workspace}/src/app.py", max_bytes=100)
        assert (data, event) == (b"print(1)\n", None)
        data, event = sandbox.read_file(f"{sandbox.paths.workspace}/run.sh", max_bytes=100)
        assert (data, event) == (b"exit 0\n", None)

    @_needs("commands")
    def test_fixtures_keep_their_mode(self, sandbox_factory: SandboxFactory) -> None:
        """A fixture given an executable mode can be run by the agent."""
        sandbox = sandbox_factory(
            fixtures={"src/app.py": b"print(1)\n", "run.sh": (b"exit 0\n", 0o755)}
        )
        assert run(sandbox, "test -x run.sh && ./run.sh && echo ran").exit_code == 0
        assert stdout_of(sandbox) == b"ran\n"

    # -- files in and out -----------------------------------------------------------------

    def test_put_file_put_dir_read_file_round_trip(
        self, sandbox_factory: SandboxFactory, tmp_path: Path
    ) -> None:
        """``read_file`` reads back what ``put_file``/``put_dir`` wrote; too big: ``too_large``."""
        sandbox = sandbox_factory()
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
        assert sandbox.read_file(f"{sandbox.paths.tests}/sub/data.txt", max_bytes=10) == (
            b"d",
            None,
        )
        data, event = sandbox.read_file(f"{sandbox.paths.tests}/sub/data.txt", max_bytes=0)
        assert data is None and event is not None and event.kind == "too_large"

    @_needs("commands")
    def test_the_verifier_runs_what_put_dir_installed(
        self, sandbox_factory: SandboxFactory, tmp_path: Path
    ) -> None:
        """A verifier phase can run (and sees executable) a script ``put_dir`` installed."""
        sandbox = sandbox_factory()
        src = tmp_path / "tests"
        src.mkdir()
        (src / "test.sh").write_text("#!/bin/bash\nexit 0\n")
        (src / "test.sh").chmod(0o755)
        sandbox.put_dir(src, sandbox.paths.tests, agent_readable=False)
        result = run(
            sandbox,
            f"bash {sandbox.paths.tests}/test.sh && test -x {sandbox.paths.tests}/test.sh"
            " && echo ran",
            role="verifier",
        )
        assert result.exit_code == 0
        assert stdout_of(sandbox, "verifier") == b"ran\n"

    def test_put_dir_replaces_the_previous_content(
        self, sandbox_factory: SandboxFactory, tmp_path: Path
    ) -> None:
        """``put_dir`` replaces the dir: nothing of an earlier ``put_dir`` stays."""
        sandbox = sandbox_factory()
        for name in ("old", "new"):
            src = tmp_path / name
            src.mkdir()
            (src / f"{name}.txt").write_text(name)
            sandbox.put_dir(src, sandbox.paths.tests, agent_readable=False)
        assert sandbox.read_file(f"{sandbox.paths.tests}/new.txt", max_bytes=10) == (b"new", None)
        _, event = sandbox.read_file(f"{sandbox.paths.tests}/old.txt", max_bytes=10)
        assert event is not None and event.kind == "missing"

    def test_read_file_reports_a_missing_file(self, sandbox_factory: SandboxFactory) -> None:
        """``read_file`` of an absent file is a ``missing`` event, not an exception."""
        sandbox = sandbox_factory()
        data, event = sandbox.read_file(f"{sandbox.paths.workspace}/absent.txt", max_bytes=10)
        assert data is None and event is not None and event.kind == "missing"

    def test_read_file_refuses_paths_outside_the_root(
        self, sandbox_factory: SandboxFactory
    ) -> None:
        """``read_file`` refuses a path that climbs out with ``..``."""
        sandbox = sandbox_factory()
        with pytest.raises((SandboxError, ValueError)):
            sandbox.read_file(f"{sandbox.paths.workspace}/../../../etc/passwd", max_bytes=1 << 20)

    def test_reset_verifier_dir_empties_it(self, sandbox_factory: SandboxFactory) -> None:
        """``reset_verifier_dir`` leaves the verifier dir empty."""
        sandbox = sandbox_factory()
        verifier = sandbox.paths.verifier
        sandbox.reset_verifier_dir()
        sandbox.put_file(f"{verifier}/stale.txt", b"old", agent_readable=True)
        sandbox.reset_verifier_dir()
        _, event = sandbox.read_file(f"{verifier}/stale.txt", max_bytes=100)
        assert event is not None and event.kind == "missing"

    def test_copy_out_copies_a_tree_and_a_file(
        self, sandbox_factory: SandboxFactory, tmp_path: Path
    ) -> None:
        """``copy_out`` copies a tree's and a single file's bytes exactly, without events."""
        sandbox = sandbox_factory(fixtures={"seeded.txt": b"seeded"})
        workspace = sandbox.paths.workspace
        sandbox.put_file(f"{workspace}/out/a.txt", b"a" * 1000, agent_readable=True)
        sandbox.put_file(f"{workspace}/out/deep/b.bin", bytes(range(256)), agent_readable=True)
        tree = tmp_path / "tree"
        events = sandbox.copy_out(
            f"{workspace}/out", tree, max_file_bytes=1 << 20, max_total_bytes=1 << 20
        )
        assert events == []
        copied = {
            p.relative_to(tree).as_posix(): p.read_bytes() for p in tree.rglob("*") if p.is_file()
        }
        assert copied == {"a.txt": b"a" * 1000, "deep/b.bin": bytes(range(256))}
        single = tmp_path / "single.txt"
        events = sandbox.copy_out(
            f"{workspace}/seeded.txt", single, max_file_bytes=1 << 20, max_total_bytes=1 << 20
        )
        assert events == [] and single.read_bytes() == b"seeded"

    @_needs("commands")
    def test_agent_cannot_read_what_is_not_agent_readable(
        self, sandbox_factory: SandboxFactory, tmp_path: Path
    ) -> None:
        """The agent reads what is ``agent_readable`` and never what is not."""
        self._require_agent_separation()
        canary = _canary()
        sandbox = sandbox_factory()
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

    # -- phases ---------------------------------------------------------------------------

    @_needs("commands")
    @pytest.mark.parametrize("code", [0, 1, 3, 127])
    def test_exit_codes_are_reported(self, sandbox_factory: SandboxFactory, code: int) -> None:
        """A phase's exit code is reported as is, with no signal, timeout or error."""
        sandbox = sandbox_factory()
        result = run(sandbox, f"exit {code}")
        assert (result.exit_code, result.signal, result.timed_out, result.error) == (
            code,
            None,
            False,
            None,
        )

    @_needs("commands")
    def test_signal_death_is_reported(self, sandbox_factory: SandboxFactory) -> None:
        """A phase killed by a signal reports the signal and no exit code."""
        result = run(sandbox_factory(), "kill -TERM $$")
        assert (result.exit_code, result.signal) == (None, 15)

    @_needs("commands")
    def test_stdin_is_delivered_in_full(self, sandbox_factory: SandboxFactory) -> None:
        """A phase's ``stdin`` reaches the process whole."""
        sandbox = sandbox_factory()
        payload = "line one\n" + "x" * 300_000 + "\nlast"
        result = run(sandbox, "sha256sum", stdin=payload)
        assert result.exit_code == 0
        digest = hashlib.sha256(payload.encode()).hexdigest()
        assert stdout_of(sandbox).split()[0].decode() == digest

    @_needs("commands")
    def test_stdin_is_empty_when_not_given(self, sandbox_factory: SandboxFactory) -> None:
        """Without ``stdin`` the process reads end of file at once."""
        sandbox = sandbox_factory()
        result = run(sandbox, "wc -c", timeout_sec=10)
        assert not result.timed_out
        assert stdout_of(sandbox).strip() == b"0"

    @_needs("commands")
    def test_env_is_delivered_exactly(self, sandbox_factory: SandboxFactory) -> None:
        """A phase's ``env`` reaches the process exactly (empty and non-ASCII values too)."""
        sandbox = sandbox_factory()
        result = run(sandbox, "env -0", env={"FOO": "bar baz", "EMPTY": "", "UNICODE": "é✓"})
        assert result.exit_code == 0
        env = dict(
            item.split("=", 1) for item in stdout_of(sandbox).decode().split("\0") if "=" in item
        )
        assert env["FOO"] == "bar baz" and env["EMPTY"] == "" and env["UNICODE"] == "é✓"
        assert env["PATH"] == FIXED_PATH

    @_needs("commands")
    def test_secret_env_reaches_the_process_but_never_argv(
        self, sandbox_factory: SandboxFactory
    ) -> None:
        """``secret_env`` reaches the process; never an argv, the supervisor's env, the output."""
        canary = _canary()
        sandbox = sandbox_factory()
        box: dict[str, PhaseResult] = {}
        gate = f"gate-{secrets.token_hex(4)}"
        # Written whole, then renamed: the check reads the file as soon as it exists.
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
            seen_at = f"{sandbox.paths.workspace}/secret_seen"
            deadline = time.monotonic() + 20
            while sandbox.read_file(seen_at, max_bytes=200)[0] is None:
                assert time.monotonic() < deadline, "the agent never started"
                time.sleep(0.02)
            assert sandbox.read_file(seen_at, max_bytes=200)[0] == canary.encode()
            # The observation sees the phase (its script names the gate): not vacuous.
            assert self._procs_with(gate), "the running phase is not among visible_processes()"
            assert self._procs_with(canary) == []
            # The supervisor itself got it on stdin, not in its environment.
            for pid, _ in self._procs_with("supervisor.py"):
                environ = self.process_environ(pid)
                assert environ is None or canary.encode() not in environ
        finally:
            sandbox.put_file(f"{sandbox.paths.workspace}/{gate}", b"", agent_readable=True)
            thread.join(30)
        assert box["r"].exit_code == 0
        assert canary.encode() not in stdout_of(sandbox)

    @_needs("commands")
    def test_cwd_defaults_to_the_workspace(self, sandbox_factory: SandboxFactory) -> None:
        """A phase starts in the workspace, or in its ``cwd``."""
        sandbox = sandbox_factory()
        assert run(sandbox, "pwd").exit_code == 0
        assert stdout_of(sandbox).decode().strip() == sandbox.paths.workspace
        other = sandbox.paths.home
        assert run(sandbox, "pwd", cwd=other).exit_code == 0
        assert stdout_of(sandbox).decode().strip() == other

    @_needs("commands")
    def test_timeout_kills_the_whole_tree(self, sandbox_factory: SandboxFactory) -> None:
        """A phase over its timeout is reported ``timed_out`` and every process of it is dead."""
        sandbox = sandbox_factory()
        token = f"1{secrets.randbelow(10**6)}.875"
        began = time.monotonic()
        result = run(
            sandbox, f"sleep {token} & setsid sleep {token} & sleep {token}", timeout_sec=1
        )
        # The sleeps would run for more than a day: a phase back within minutes was not
        # waited out (the bound leaves a loaded machine room to start and tear it down).
        assert time.monotonic() - began < 300
        assert self._procs_with(token) == []
        assert result.error is None, result.error
        assert result.timed_out
        assert result.exit_code is None

    @_needs("commands")
    def test_background_processes_die_with_the_phase(self, sandbox_factory: SandboxFactory) -> None:
        """Processes a phase left behind are killed and reported as survivors."""
        sandbox = sandbox_factory()
        token = f"1{secrets.randbelow(10**6)}.9375"
        result = run(sandbox, f"( ( sleep {token} & ) & ); setsid sleep {token} & sleep 0.3")
        assert result.exit_code == 0
        assert self._procs_with(token) == []
        assert result.survivors

    @_needs("commands")
    def test_output_is_capped(self, sandbox_factory: SandboxFactory) -> None:
        """Output over ``max_output_bytes`` is cut there, counted in full and marked truncated."""
        sandbox = sandbox_factory()
        result = run(sandbox, "head -c 3000000 /dev/zero", max_output_bytes=100_000)
        assert result.exit_code == 0 and result.output_truncated
        assert result.stdout_bytes == 3_000_000
        data, event = sandbox.read_file(f"{sandbox.paths.logs}/agent.stdout", max_bytes=1 << 22)
        assert event is None and data is not None and len(data) == 100_000

    # -- verifier dir and evidence --------------------------------------------------------

    @_needs("commands")
    def test_the_agent_cannot_write_the_verifier_dir(self, sandbox_factory: SandboxFactory) -> None:
        """Nothing the agent writes or plants reaches the verifier dir; the grader can write it."""
        self._require_agent_separation()
        sandbox = sandbox_factory()
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

    @_needs("commands")
    def test_copy_out_refuses_symlinks_and_fifos(
        self, sandbox_factory: SandboxFactory, tmp_path: Path, bait_dir: Path
    ) -> None:
        """``copy_out`` and ``read_file`` never follow a link or open a FIFO; they report them."""
        canary = _canary()
        (bait_dir / "canary.txt").write_text(canary)
        (bait_dir / "canary.txt").chmod(0o644)
        sandbox = sandbox_factory()
        script = (
            f"echo fine > ok.txt; ln -s {bait_dir}/canary.txt leak.txt;"
            f" ln -s {bait_dir} leakdir; mkfifo pipe; mkdir -p sess;"
            f" ln -s {bait_dir}/canary.txt sess/transcript.jsonl"
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
        copied = b"".join(
            p.read_bytes() for p in dest.rglob("*") if p.is_file() and not p.is_symlink()
        )
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


__all__ = ["LIMITATIONS", "Limitation", "SandboxContract", "SandboxFactory", "run", "stdout_of"]
