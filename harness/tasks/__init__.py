"""Task directories: the ``task.toml`` model, discovery, loading, validation, hashing.

The format is Harbor / Terminal-Bench 2 compatible (steps, separate verifiers, artifacts,
healthchecks, compose, MCP servers, ...); see docs/tasks.md and docs/harbor.md.
"""

from harness.tasks.loader import (
    INSTRUCTION_MD,
    SOLVE_SCRIPT,
    TASK_TOML,
    TEST_SCRIPT,
    Task,
    TaskError,
    TaskSetError,
    check_tasks,
    content_hash,
    discover,
    is_task_dir,
    load_task,
    load_tasks,
    taskset_name,
)
from harness.tasks.model import (
    UNSUPPORTED_KEYS,
    AgentSection,
    Artifact,
    EnvironmentSection,
    Healthcheck,
    McpServer,
    SolutionSection,
    StepSection,
    TaskConfig,
    TaskSection,
    User,
    VerifierSection,
)
from harness.tasks.steps import Step

__all__ = [
    "INSTRUCTION_MD",
    "SOLVE_SCRIPT",
    "TASK_TOML",
    "TEST_SCRIPT",
    "UNSUPPORTED_KEYS",
    "AgentSection",
    "Artifact",
    "EnvironmentSection",
    "Healthcheck",
    "McpServer",
    "Step",
    "StepSection",
    "SolutionSection",
    "Task",
    "TaskConfig",
    "TaskError",
    "TaskSection",
    "TaskSetError",
    "User",
    "VerifierSection",
    "check_tasks",
    "content_hash",
    "discover",
    "is_task_dir",
    "load_task",
    "load_tasks",
    "taskset_name",
]
