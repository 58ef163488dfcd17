"""Installed agents: the CLIs people evaluate, fetched by the harness on the host.

:class:`InstalledAgent` is the seam (install, prepare, command, collect, convert);
:mod:`.cache` the host-side, content-addressed cache the sandbox sees read-only; each CLI
has its module (``claude_code``), registered under the ``harness.agents`` entry points
like the built-ins (docs/agents.md).
"""

from harness.agents.installed.base import AGENT_LOG, INSTALL_MOUNT, InstalledAgent
from harness.agents.installed.cache import AgentCache, CacheEntry, InstallError, InstallSpec

__all__ = [
    "AGENT_LOG",
    "INSTALL_MOUNT",
    "AgentCache",
    "CacheEntry",
    "InstallError",
    "InstallSpec",
    "InstalledAgent",
]
