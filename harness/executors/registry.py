"""The trial executors registry: the ``harness.executors`` entry points, and opening one.

A distribution adds an executor by declaring it::

    [project.entry-points."harness.executors"]
    mycluster = "my_package.executor:MyExecutor"  # a harness.executors.TrialExecutor

``harness executors list`` shows what is installed; ``--executor NAME`` selects one.
"""

from __future__ import annotations

from harness.config import RunConfig
from harness.executors.base import ExecutorOptions, TrialExecutor
from harness.registry import Registry, subclass_of

EXECUTORS_GROUP = "harness.executors"
"""The entry-point group of trial executors."""

EXECUTORS: Registry[type[TrialExecutor]] = Registry(
    EXECUTORS_GROUP, "executor", subclass_of(TrialExecutor)
)
"""Trial executors: ``TrialExecutor`` subclasses (built-ins: ``local``, ``ray``)."""


def open_executor(config: RunConfig, run_name: str) -> TrialExecutor:
    """The run's trial executor, opened (connected, nothing dispatched yet).

    Raises:
        PluginError: The executor is not installed (or does not load).
        UsageError: The executor refused its options (e.g. Ray is not installed, or the
            cluster is unreachable).
    """
    executor_class = EXECUTORS.get(config.executor.name)
    executor = executor_class(ExecutorOptions(run_name=run_name, config=config))
    executor.name = config.executor.name
    return executor


__all__ = ["EXECUTORS", "EXECUTORS_GROUP", "open_executor"]
