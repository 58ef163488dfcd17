"""The run configuration: sections, layers, the saved ``config.toml``, 0.1's flat keys.

``[agent]``, ``[sandbox]``, ``[executor]``, ``[tasks]``, ``[retry]``, ``[budget]`` and
``[gateway]`` are sections of :class:`RunConfig`; the run-level keys (``model``,
``rollouts``, ``concurrency``...) sit beside them. See ``docs/configuration.md``.
"""

from harness.config.layers import (
    CONFIG_FILENAME,
    RESUME_FREE_KEYS,
    config_diff,
    deep_merge,
    file_layer,
    load_saved_config,
    parse_set,
    read_config_file,
    refuse_changes,
    resolve_config,
    resume_config,
    save_config,
    secret_keys,
    validate_config,
)
from harness.config.legacy import LEGACY_KEYS
from harness.config.model import (
    AgentConfig,
    BudgetConfig,
    DatasetsConfig,
    EnvConfig,
    ExecutorConfig,
    GatewayConfig,
    RetryConfig,
    RunConfig,
    TasksConfig,
)
from harness.config.toml import to_toml
from harness.errors import ConfigError
from sandbox.options import SandboxConfig

__all__ = [
    "CONFIG_FILENAME",
    "LEGACY_KEYS",
    "RESUME_FREE_KEYS",
    "AgentConfig",
    "BudgetConfig",
    "EnvConfig",
    "ConfigError",
    "DatasetsConfig",
    "ExecutorConfig",
    "GatewayConfig",
    "RetryConfig",
    "RunConfig",
    "SandboxConfig",
    "TasksConfig",
    "config_diff",
    "deep_merge",
    "file_layer",
    "load_saved_config",
    "parse_set",
    "read_config_file",
    "refuse_changes",
    "resolve_config",
    "resume_config",
    "save_config",
    "secret_keys",
    "to_toml",
    "validate_config",
]
