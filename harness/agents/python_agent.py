"""``python:module:Class`` agents: trusted code run in the harness process."""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from typing import Any

from typing_extensions import override

from harness.agents.context import AgentContext
from harness.agents.kinds import HarnessAgent, reject_command, reject_options
from harness.config import AgentConfig
from harness.errors import UsageError

PREFIX = "python:"


class PythonAgent(HarnessAgent):
    """Wraps a user class with a ``run(context)`` method.

    The class is imported (it is trusted code: it runs with the harness's privileges, like
    any Python you import) and instantiated once per trial. Its actions on the task go
    through ``context.exec`` (a supervised phase as the agent user) and its model calls
    through ``context.chat`` (the trial's gateway).
    """

    model_use = "optional"

    def __init__(self, spec: str) -> None:
        target = spec.removeprefix(PREFIX)
        module_name, sep, class_name = target.partition(":")
        if not sep or not module_name or not class_name:
            raise UsageError(f"--agent {spec}: write python:package.module:ClassName")
        if os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())  # like `python -m`: the user's own modules
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            raise UsageError(f"--agent {spec}: cannot import {module_name}: {exc}") from None
        cls = getattr(module, class_name, None)
        if cls is None or not inspect.isclass(cls):
            raise UsageError(f"--agent {spec}: {module_name} has no class {class_name}")
        if not callable(getattr(cls, "run", None)):
            raise UsageError(f"--agent {spec}: {class_name} needs a run(context) method")
        self.spec = spec
        self.cls = cls
        self.name = getattr(cls, "name", None) or f"{module_name}.{class_name}"

    @classmethod
    def from_config(cls, config: AgentConfig) -> PythonAgent:
        """The agent named by ``config.name`` (``python:module:Class``); no command.

        Raises:
            AgentConfigError: A command or options were given (the class takes none).
        """
        reject_command(config)
        reject_options(config.name, list(config.kwargs))
        return cls(config.name)

    @override
    def run(self, context: AgentContext) -> None:
        instance: Any = self.cls()
        instance.run(context)

    @override
    def describe(self) -> dict[str, Any]:
        return {"name": self.name, "import_path": self.spec.removeprefix(PREFIX)}
