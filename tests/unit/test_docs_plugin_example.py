"""docs/agents.md's plug-in example runs as written: its class, taken from the doc's text.

The example is the first ``python`` block under "Adding one as a plug-in". It must accept
the models of the API it names (an ``openai/*`` model for ``openai-chat``) and refuse
another provider's before anything is fetched. Its entry is made by the real cache, whose
fetch from the registry is replaced by writing the one file the example starts from (no
``my-cli`` package is fetched from npm).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from harness.agents.installed import AgentCache, CacheEntry, InstalledAgent, InstallSpec
from harness.errors import AgentConfigError
from harness.models.catalog import ModelSpec
from harness.tasks.loader import load_task

REPO = Path(__file__).resolve().parents[2]
DOC = REPO / "docs" / "agents.md"
SECTION = "## Adding one as a plug-in"


def documented_example() -> str:
    """The doc's plug-in example: the first python block of its section."""
    text = DOC.read_text()
    section = text[text.index(SECTION) :]
    match = re.search(r"^```python\n(.*?)^```", section, re.MULTILINE | re.DOTALL)
    assert match is not None, f"{DOC} has no python block under {SECTION!r}"
    return match.group(1)


def example_class() -> type[InstalledAgent]:
    namespace: dict[str, Any] = {}
    exec(compile(documented_example(), str(DOC), "exec"), namespace)  # the doc's own text
    cls = namespace["MyCli"]
    assert isinstance(cls, type) and issubclass(cls, InstalledAgent)
    return cls


class PrefilledCache(AgentCache):
    """The real cache, its registry fetch replaced by the file the example starts from."""

    def _fetch(self, spec: InstallSpec, staging: Path) -> None:
        program = staging / "npm" / "node_modules" / "my-cli" / "bin" / "my-cli"
        program.parent.mkdir(parents=True)
        program.write_text("#!/bin/sh\n")


class NoFetchCache(AgentCache):
    """Fails the test if anything is fetched."""

    def ensure(self, spec: InstallSpec) -> CacheEntry:
        raise AssertionError(f"{spec.agent} was fetched before its model was checked")


def _model(provider: str, name: str, api: str) -> ModelSpec:
    return ModelSpec(provider=provider, name=name, upstream=name, api=api)


@pytest.mark.parametrize("model", ["openai/gpt-4.1", "faux/demo"])
def test_the_documented_example_accepts_the_models_of_its_api(model: str, tmp_path: Path) -> None:
    provider, name = model.split("/")
    agent = example_class()(cache=PrefilledCache(tmp_path / "cache"))
    agent.bind_model(_model(provider, name, "openai-chat"))
    agent.check(load_task(REPO / "examples" / "tasks" / "hello-file"))
    assert agent.entry is not None and (agent.entry.path / "manifest.json").is_file()
    assert agent.describe()["install"]["tree"] == agent.entry.tree


def test_the_documented_example_refuses_another_providers_model(tmp_path: Path) -> None:
    agent = example_class()(cache=NoFetchCache(tmp_path / "cache"))
    agent.bind_model(_model("anthropic", "claude-sonnet-4-0", "anthropic-messages"))
    with pytest.raises(AgentConfigError, match="for openai and faux models"):
        agent.check(load_task(REPO / "examples" / "tasks" / "hello-file"))
