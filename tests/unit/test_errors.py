"""One exception tree rooted at HarnessError; exit codes mapped in one place."""

from __future__ import annotations

import importlib
import inspect
import pkgutil

import pytest

import harness
import sandbox
from harness.errors import (
    EXIT_INTERRUPTED,
    EXIT_TRIAL_ERRORS,
    EXIT_USAGE,
    ConfigError,
    CorruptRecordError,
    ExportError,
    HarnessError,
    ModelSelectionError,
    PluginError,
    ResumeError,
    SandboxError,
    TaskError,
    TaskSetError,
    UsageError,
    VerifierError,
    exit_code_for,
)
from sandbox.backend import SUPERVISOR_SIBLINGS
from sandbox.errors import EngineUnavailable

#: Run inside the sandbox on the stdlib alone (the supervisor and the siblings shipped with
#: it): their exceptions never reach the harness.
IN_SANDBOX = {
    "sandbox.inside.supervisor",
    *(f"sandbox.inside.{name}" for name in SUPERVISOR_SIBLINGS),
}


def _modules() -> list[str]:
    names = []
    for package in (harness, sandbox):
        for info in pkgutil.walk_packages(package.__path__, prefix=f"{package.__name__}."):
            if info.name not in IN_SANDBOX and not info.name.endswith("__main__"):
                names.append(info.name)
    return names


def test_every_public_error_of_harness_and_sandbox_derives_from_harness_error() -> None:
    loose = []
    for name in _modules():
        module = importlib.import_module(name)
        for attr, value in vars(module).items():
            if (
                inspect.isclass(value)
                and issubclass(value, BaseException)
                and value.__module__ == name
                and not attr.startswith("_")
                and not issubclass(value, HarnessError)
            ):
                loose.append(f"{name}.{attr}")
    assert loose == []


def test_the_sandbox_branch_hangs_under_the_same_root() -> None:
    assert issubclass(SandboxError, HarnessError)
    assert issubclass(EngineUnavailable, HarnessError)
    assert harness.HarnessError is HarnessError


@pytest.mark.parametrize(
    "error",
    [
        UsageError("x"),
        ConfigError("x"),
        ModelSelectionError("x"),
        ResumeError("x"),
        PluginError("x"),
        TaskSetError([]),
        ExportError("x"),
        CorruptRecordError(__import__("pathlib").Path("t"), 2, "bad"),
    ],
)
def test_usage_config_task_and_input_errors_exit_2(error: BaseException) -> None:
    assert exit_code_for(error) == EXIT_USAGE


def test_task_errors_are_usage_errors() -> None:
    assert issubclass(TaskError, UsageError) and issubclass(TaskSetError, UsageError)


@pytest.mark.parametrize(
    ("error", "code"),
    [
        (KeyboardInterrupt(), EXIT_INTERRUPTED),
        (VerifierError("x"), EXIT_TRIAL_ERRORS),
        (SandboxError("x"), EXIT_TRIAL_ERRORS),
        (RuntimeError("x"), EXIT_TRIAL_ERRORS),
    ],
)
def test_other_errors_exit_1_and_interrupts_130(error: BaseException, code: int) -> None:
    assert exit_code_for(error) == code
