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

from harness._version import __version__
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
