"""harness: evaluate AI agents in isolated sandboxes, with honest statistics.

The public API::

    import harness

    config = harness.RunConfig(
        tasks=harness.TasksConfig(paths=["examples/tasks"]),
        agent=harness.AgentConfig(name="oracle"),
    )
    outcome = harness.run(config)            # what `harness run` does
    results = harness.load_run(outcome.run_dir)

See ``docs/`` for the architecture, the config, the run dir and writing plug-ins.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from harness._version import __version__

if TYPE_CHECKING:
    from harness.agents import Agent, AgentContext, HarnessAgent, SandboxAgent
    from harness.api import RunResults, check, load_run, resume, run
    from harness.config import (
        AgentConfig,
        BudgetConfig,
        DatasetsConfig,
        ExecutorConfig,
        RetryConfig,
        RunConfig,
        SandboxConfig,
        TasksConfig,
    )
    from harness.errors import (
        ConfigError,
        HarnessError,
        PluginError,
        RunStopped,
        SandboxError,
        TaskSetError,
        UsageError,
    )
    from harness.records import TrialRecord, TrialStatus
    from harness.runner import RunEvents, RunOutcome, RunStart

# What each public name is imported from, on first use: `import harness` stays cheap, so a
# command that needs little (`harness --version`, `harness report`) imports little.
_EXPORTS: dict[str, str] = {
    "Agent": "harness.agents",
    "AgentContext": "harness.agents",
    "HarnessAgent": "harness.agents",
    "SandboxAgent": "harness.agents",
    "RunResults": "harness.api",
    "check": "harness.api",
    "load_run": "harness.api",
    "resume": "harness.api",
    "run": "harness.api",
    "AgentConfig": "harness.config",
    "BudgetConfig": "harness.config",
    "DatasetsConfig": "harness.config",
    "ExecutorConfig": "harness.config",
    "RetryConfig": "harness.config",
    "RunConfig": "harness.config",
    "SandboxConfig": "harness.config",
    "TasksConfig": "harness.config",
    "ConfigError": "harness.errors",
    "HarnessError": "harness.errors",
    "PluginError": "harness.errors",
    "RunStopped": "harness.errors",
    "SandboxError": "harness.errors",
    "TaskSetError": "harness.errors",
    "UsageError": "harness.errors",
    "TrialRecord": "harness.records",
    "TrialStatus": "harness.records",
    "RunEvents": "harness.runner",
    "RunOutcome": "harness.runner",
    "RunStart": "harness.runner",
}


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'harness' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *_EXPORTS})


__all__ = [
    "Agent",
    "AgentConfig",
    "AgentContext",
    "BudgetConfig",
    "ConfigError",
    "DatasetsConfig",
    "HarnessAgent",
    "HarnessError",
    "PluginError",
    "RetryConfig",
    "RunConfig",
    "RunEvents",
    "RunOutcome",
    "RunResults",
    "RunStart",
    "RunStopped",
    "SandboxAgent",
    "ExecutorConfig",
    "SandboxConfig",
    "SandboxError",
    "TaskSetError",
    "TasksConfig",
    "TrialRecord",
    "TrialStatus",
    "UsageError",
    "__version__",
    "check",
    "load_run",
    "resume",
    "run",
]
