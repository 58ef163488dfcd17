"""Red team: the verifier's git trusts the agent's repositories, so their config runs.

git refuses a repository another user owns ("dubious ownership", CVE-2022-24765) exactly
because its ``.git/config`` names commands git runs (``core.fsmonitor``, hooks, filters,
``diff.external``). The supervisor writes every repository under the workspace into the
verifier's ``safe.directory`` (``sandbox/inside/git_repos.py``), so an unprivileged agent's
``core.fsmonitor`` runs as the verifier's user the moment the tests run ``git status``
there (as git-based Terminal-Bench 2 tasks' tests do), with the verdict within reach.

Judged from outside: the honest reward is 0 (no answer), the recorded one must be 0 and the
marker the hook writes as the verifier must not exist.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

AGENT = """
cd /app && git init -q . && git config core.fsmonitor \
  'id -u > /logs/verifier/pwned; echo 1 > /logs/verifier/reward.txt; exit 1'
"""

#: The base image with git (Terminal-Bench 2's images ship it).
GIT_IMAGE = (
    "FROM harness/base:bookworm\nRUN apt-get update && apt-get install -y --no-install-recommends"
    " git && rm -rf /var/lib/apt/lists/*\nWORKDIR /app\n"
)

#: The pessimistic default first; the real check (answer.txt) never passes. The tests look at
#: the agent's repository, as a git task's tests do.
TEST = """
echo 0 > /logs/verifier/reward.txt
cd /app && git status --porcelain > /dev/null 2>&1
test -f /app/answer.txt && echo 1 > /logs/verifier/reward.txt
exit 0
"""


@pytest.mark.docker
def test_an_agents_repository_config_never_runs_in_the_verifier(
    cli: Any, sec: Any, tmp_path: Path
) -> None:
    task: Path = sec.write_task(
        tmp_path / "tasks",
        sec.unique("rt-git-trust"),
        attack=AGENT,
        test_sh=TEST,
        dockerfile=GIT_IMAGE,
    )
    run = cli.run([task], timeout=240)
    assert run.records, str(run)
    record = run.records[0]
    assert record["status"] == "completed" and record["attempt"] == 1, str(run)
    pwned = run.evidence(record) / "verifier" / "pwned"
    assert not pwned.exists(), f"agent code ran as uid {pwned.read_text().strip()} in grading"
    assert record["reward"] == 0.0, str(run)
