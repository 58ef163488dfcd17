"""The contract kit (:mod:`sandbox.testing`) cannot pass vacuously.

Each case runs the kit, in-process with ``pytester``, over a ``FakeSandbox`` broken in one
promise, and asserts that exactly the checks of that promise fail and every other passes.
A sandbox that runs nothing, not declaring it, fails every check that needs a command but
the one a do-nothing phase (exit 0) satisfies; a backend that declares it runs no command
yet does is caught; a declaration the kit does not know, or without a reason, is refused.
"""

from __future__ import annotations

import textwrap

import pytest

from sandbox.backend import Sandbox, SandboxSpec
from sandbox.fake import FakeSandbox
from sandbox.testing import SandboxContract

pytest_plugins = ["pytester"]

#: One broken promise each: the methods of a FakeSandbox subclass, and the checks it fails.
BROKEN: dict[str, tuple[str, set[str]]] = {
    "stop_twice_raises": (
        """
        def stop(self):
            if self.stopped:
                raise RuntimeError("stopped twice")
            super().stop()
        """,
        {
            "test_start_stop_is_idempotent",
            "test_stop_before_start_is_safe",
            "test_stop_after_a_failed_start_is_safe",
        },
    ),
    "fixtures_unchecked": (
        """
        def start(self):
            self.started = True
            for name, fixture in self.spec.fixtures.items():
                data = fixture[0] if isinstance(fixture, tuple) else fixture
                self.files[self.paths.workspace + "/" + name] = data
        """,
        {"test_stop_after_a_failed_start_is_safe"},
    ),
    "fixtures_not_seeded": (
        """
        def start(self):
            for name in self.spec.fixtures:
                check_fixture_path(name)
            self.started = True
        """,
        {
            "test_start_stop_is_idempotent",
            "test_workspace_is_seeded_from_fixtures",
            "test_copy_out_copies_a_tree_and_a_file",
        },
    ),
    "paths_collide": (
        """
        @property
        def paths(self):
            return SandboxPaths.under("/fake", tests="/fake/workspace")
        """,
        {"test_paths_are_distinct_absolute_paths"},
    ),
    "put_dir_merges": (
        """
        def put_dir(self, src, dest, *, agent_readable):
            for path in src.rglob("*"):
                if path.is_file():
                    self.files[dest + "/" + path.relative_to(src).as_posix()] = path.read_bytes()
        """,
        {"test_put_dir_replaces_the_previous_content"},
    ),
    "read_file_ignores_max_bytes": (
        """
        def read_file(self, path, *, max_bytes):
            data, event = super().read_file(path, max_bytes=1 << 30)
            return data, event
        """,
        {"test_put_file_put_dir_read_file_round_trip"},
    ),
    "read_file_climbs_out": (
        """
        def read_file(self, path, *, max_bytes):
            return super().read_file(posixpath.normpath(path), max_bytes=max_bytes)
        """,
        {"test_read_file_refuses_paths_outside_the_root"},
    ),
    "missing_file_raises": (
        """
        def read_file(self, path, *, max_bytes):
            data, event = super().read_file(path, max_bytes=max_bytes)
            if event is not None and event.kind == "missing":
                raise FileNotFoundError(path)
            return data, event
        """,
        {
            "test_declared_limitations_hold",
            "test_read_file_reports_a_missing_file",
            "test_put_dir_replaces_the_previous_content",
            "test_reset_verifier_dir_empties_it",
        },
    ),
    "reset_verifier_dir_keeps_files": (
        """
        def reset_verifier_dir(self):
            pass
        """,
        {"test_reset_verifier_dir_empties_it"},
    ),
    "copy_out_truncates": (
        """
        def copy_out(self, path, dest, *, max_file_bytes, max_total_bytes):
            return super().copy_out(path, dest, max_file_bytes=100, max_total_bytes=100)
        """,
        {"test_copy_out_copies_a_tree_and_a_file"},
    ),
    "declares_no_commands_but_runs_them": (
        """
        def run_phase(self, request):
            target = re.search(r"> (\\S+)$", request.argv[-1])
            if target:
                self.files[target.group(1)] = b"ran\\n"
            return super().run_phase(request)
        """,
        {"test_declared_limitations_hold"},
    ),
}

MODULE = """
import posixpath
import re

from sandbox.backend import SandboxPaths
from sandbox.fake import FakeSandbox
from sandbox.seeding import check_fixture_path
from sandbox.testing import SandboxContract


class Broken(FakeSandbox):
{body}


class TestBroken(SandboxContract):
    limitations = {limitations}

    def make_sandbox(self, spec):
        return Broken(spec)
"""


def run_kit(
    pytester: pytest.Pytester, name: str, body: str, limitations: str, *args: str
) -> tuple[set[str], set[str]]:
    """Run the kit over ``Broken``; the names of the checks that (passed, failed)."""
    source = MODULE.format(
        body=textwrap.indent(textwrap.dedent(body), "    "), limitations=limitations
    )
    pytester.makepyfile(**{f"test_{name}": source})
    passed, skipped, failed = pytester.inline_run("-p", "no:cacheprovider", *args).listoutcomes()
    assert skipped == []
    return (
        {r.nodeid.rsplit("::", 1)[-1] for r in passed},
        {r.nodeid.rsplit("::", 1)[-1] for r in failed},
    )


FAKE_LIMITS = '{"commands": "no process runs"}'


@pytest.mark.parametrize("name", sorted(BROKEN))
def test_a_broken_promise_fails_exactly_its_checks(pytester: pytest.Pytester, name: str) -> None:
    body, expected = BROKEN[name]
    passed, failed = run_kit(pytester, name, body, FAKE_LIMITS)
    assert failed == expected
    assert passed and not passed & expected


def test_the_unbroken_fake_passes_every_check(pytester: pytest.Pytester) -> None:
    passed, failed = run_kit(pytester, "unbroken", "pass", FAKE_LIMITS)
    assert failed == set()
    assert "test_put_dir_replaces_the_previous_content" in passed


def _needs_commands() -> set[str]:
    return {
        name
        for name in dir(SandboxContract)
        if name.startswith("test_")
        and getattr(getattr(SandboxContract, name), "_contract_needs", None) == "commands"
    }


def test_a_sandbox_that_runs_nothing_fails_the_command_checks(pytester: pytest.Pytester) -> None:
    # Undeclared, the fake's do-nothing phases (exit 0, no output) meet the command checks.
    # The secret-env check is left out: it waits out its 20 s deadline for the agent.
    passed, failed = run_kit(pytester, "silent", "pass", "{}", "-k", "not secret_env")
    # Exit 0 is all this one asks of a phase: a do-nothing one gives it (1, 3, 127 fail).
    assert "test_exit_codes_are_reported[0]" in passed
    assert failed == {
        name
        for name in _needs_commands() - {"test_secret_env_reaches_the_process_but_never_argv"}
        for name in (
            [f"{name}[{code}]" for code in (1, 3, 127)]
            if name == "test_exit_codes_are_reported"
            else [name]
        )
    }


def test_a_declaration_must_be_known_and_explained() -> None:
    with pytest.raises(TypeError, match="unknown limitations"):

        class Unknown(SandboxContract):
            limitations = {"users": "none"}  # type: ignore[dict-item]

            def make_sandbox(self, spec: SandboxSpec) -> Sandbox:
                return FakeSandbox(spec)

    with pytest.raises(TypeError, match="without saying why"):

        class Unexplained(SandboxContract):
            limitations = {"commands": " "}

            def make_sandbox(self, spec: SandboxSpec) -> Sandbox:
                return FakeSandbox(spec)
