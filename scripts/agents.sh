#!/usr/bin/env bash
# Fetches the pinned agent CLIs (claude-code, codex, gemini-cli, opencode, qwen-code, cline,
# mini-swe-agent, aider, terminus-2, openhands-sdk: every installed agent registered) into the
# harness's cache on this host ($HARNESS_AGENT_CACHE, else ~/.cache/harness/agents) through the
# harness's own installer: npm, PyPI and (terminus-2's and openhands-sdk's Python 3.13 and tmux)
# Debian's mirror with apt-get on the host, nothing inside a sandbox. Idempotent: an intact
# entry is reused.
set -euo pipefail
repo=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
"$repo/.venv/bin/harness" agents install
