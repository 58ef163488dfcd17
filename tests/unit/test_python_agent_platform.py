"""The Python agents refuse a C library their relocated runtime was not built for.

That runtime brings its own C library and loader, so it runs on a musl image without the
option (tests/e2e/test_agent_musl.py); the refusal says so.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.agents.installed.aider import Aider
from harness.agents.installed.cache import AgentCache, InstallError
from harness.agents.installed.mini_swe_agent import MiniSweAgent
from harness.agents.installed.python_agent import PythonInstalledAgent


@pytest.mark.parametrize("agent_class", [Aider, MiniSweAgent])
def test_a_musl_image_is_refused_before_anything_is_fetched(
    agent_class: type[PythonInstalledAgent], tmp_path: Path
) -> None:
    cache = tmp_path / "cache"
    agent = agent_class(libc="musl", cache=AgentCache(cache))
    # The message says what to do: the runtime runs on a musl image without the option.
    expected = r"libc = 'musl' is not supported.*relocated.*runs on a musl.*drop agent.kwargs.libc"
    with pytest.raises(InstallError, match=expected):
        agent.install()
    assert not cache.exists() or not any(cache.iterdir())
