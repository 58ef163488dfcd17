"""The Terminal-Bench 2 tasks issue 34's Done-when names, as far as they exist verbatim here.

``tests/fixtures/tb2/named/`` holds the two found with every file byte for byte TB2's
(``git-multibranch``, ``nginx-request-logging``: see that README; the other five named tasks'
solutions were not found verbatim, so they are not vendored). Both are service tasks: the
oracle, as root, installs or configures and starts ``nginx`` (and ``sshd``), and the tests
talk to them. What holds today, on docker (runc), one run of both, ``-j 2``:

- with ``--agent-root allow --agent-services keep`` (runc) ``nginx-request-logging`` scores 1
  with ``oracle`` (Harbor's agent is root): the root nginx its solution starts is kept
  through grading, walled in by Landlock (the record's ``agent_services_wall``), and the
  tests query it. ``git-multibranch``'s solution stops at ``mkdir /git``: the wall grants
  no new entry of ``/`` (it would have to grant ``/`` itself, and so ``/tests``);
- under gVisor (``--runtime runsc --agent-root isolated``), which has no Landlock, ``keep``
  with a root agent is refused before anything runs;
- with ``--agent-root allow`` alone (services killed before grading) everything else matches
  Harbor: the images build, the root solutions run, the verifier runs, and exactly the tests
  that query the servers fail, on a refused connection; the run records the root services it
  killed (a ``survivors`` event naming them).

``named/git-leak-recovery`` has every file but its solution (not found verbatim): run with
``nop`` under the default ``--agent-root never``, its tests' ``git`` commands work on the
agent's repository (the verifier's ``safe.directory`` lists it: git 2.39 here, 2.43 in TB2's
image, neither reads the ``<workspace>/*`` glob), so only the test of the agent's answer
fails. Without that entry three of its five tests fail with "dubious ownership" (checked by
turning the supervisor's repository walk off).

The task images and alias bases are content-addressed (built once, reused by later runs).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest
from test_tb2_sample import FIXTURES, _aliases, rewards, run_sample

NAMED = FIXTURES / "named"
TASKS = ("git-multibranch", "nginx-request-logging")
#: The named task vendored without its solution: every test but the answer's uses git.
GIT_TASK = "git-leak-recovery"
#: nginx-request-logging's tests that never connect to the server, and those that do.
NGINX_OFFLINE = {"test_nginx_installed", "test_nginx_config_syntax", "test_nginx_config_settings"}
NGINX_ONLINE = {
    "test_nginx_running",
    "test_index_page_content",
    "test_custom_404_page",
    "test_log_file_creation",
    "test_log_file_format",
}
pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def aliases() -> list[str]:
    """``--base-alias`` for the named tasks' bases (both Debian 12 targets)."""
    return _aliases({"bookworm"})


def named(tmp_path: Path, names: tuple[str, ...] = TASKS) -> Path:
    tasks = tmp_path / "tb2"
    for name in names:
        shutil.copytree(NAMED / name, tasks / name)
    return tasks


def outcomes(e2e: Any, out: Path, record: dict[str, Any]) -> dict[str, str]:
    """Each of a trial's tests (pytest's name) and its outcome, from its ``ctrf.json``."""
    ctrf = e2e.only_run_dir(out) / record["evidence_dir"] / "verifier" / "ctrf.json"
    tests = json.loads(ctrf.read_text())["results"]["tests"]
    return {test["name"].rsplit("::", 1)[-1]: test["status"] for test in tests}


def test_under_the_default_the_verifiers_git_trusts_the_agents_repository(
    e2e: Any, tmp_path: Path, aliases: list[str]
) -> None:
    tasks = named(tmp_path, (GIT_TASK,))
    result, records = run_sample(e2e, tasks, tmp_path / "runs", aliases, "nop")
    assert rewards(records) == {GIT_TASK: ("completed", 0.0)}, result
    assert outcomes(e2e, tmp_path / "runs", records[GIT_TASK]) == {
        "test_flag_file_exists_and_correct": "failed",  # nop recovered nothing
        "test_no_secrets_in_commits": "passed",
        "test_good_commits_preserved": "passed",
        "test_no_secrets_in_unreachable_objects": "passed",
        "test_repository_contents_checksum": "passed",
    }


def test_a_root_oracles_services_are_kept_and_answer_the_tests(
    e2e: Any, tmp_path: Path, aliases: list[str]
) -> None:
    """runc: every process of the root oracle's phase is walled in by Landlock.

    nginx-request-logging scores 1. git-multibranch's solution makes ``/git``, a new entry
    of ``/``, which the wall never grants (a grant on ``/`` would grant ``/tests``): it
    stops there, before its servers start.
    """
    tasks = named(tmp_path)
    result, records = run_sample(e2e, tasks, tmp_path / "runs", aliases, "oracle",
                                 "--agent-root", "allow", "--agent-services", "keep")  # fmt: skip
    assert rewards(records) == {
        "git-multibranch": ("agent_error", 0.0),
        "nginx-request-logging": ("completed", 1.0),
    }, result
    [error] = records["git-multibranch"]["errors"]
    assert (
        "mkdir: cannot create directory \u2018/git\u2019: Permission denied" in error["last_error"]
    ), error
    nginx = records["nginx-request-logging"]
    assert nginx["attempt"] == 1, nginx
    assert nginx["sandbox"]["agent_services_wall"] == "landlock", nginx["sandbox"]
    alive = nginx["agent_processes_alive"]
    # The root master and its www-data workers (they inherit its listening socket).
    assert {(p["comm"], p["uid"]) for p in alive} == {("nginx", 0), ("nginx", 33)}, alive
    # The very master and workers kept at the oracle's end serve the tests, all listening
    # (the www-data workers' fds read as their own user): none was killed and respawned.
    [kept] = [e for e in nginx["events"] if e.get("type") == "agent_services_kept"]
    assert sorted(p["pid"] for p in kept["processes"]) == sorted(p["pid"] for p in alive), kept
    assert all(p["listening"] for p in alive), alive
    outcome = outcomes(e2e, tmp_path / "runs", nginx)
    assert set(outcome.values()) == {"passed"}, outcome


def test_gvisor_refuses_a_root_oracles_kept_services(
    e2e: Any, tmp_path: Path, aliases: list[str]
) -> None:
    """runsc has no Landlock: ``--agent-root isolated`` with ``keep`` runs nothing."""
    out = tmp_path / "runs"
    result = e2e.run(
        "run", named(tmp_path), "--agent", "oracle", "--sandbox", "docker", *aliases,
        "--runtime", "runsc", "--agent-root", "isolated", "--agent-services", "keep",
        "-o", out, "--display", "none",
        timeout=300,
    )  # fmt: skip
    assert result.code == 2, result
    assert "--agent-services keep with --agent-root isolated" in result.stderr, result
    assert "gVisor (runsc) has no Landlock" in result.stderr, result
    assert not out.exists() or not any(out.iterdir()), result


def test_with_a_root_oracle_only_the_tests_that_query_its_killed_services_fail(
    e2e: Any, tmp_path: Path, aliases: list[str]
) -> None:
    tasks = named(tmp_path)
    result, records = run_sample(e2e, tasks, tmp_path / "runs", aliases, "oracle",
                                 "--agent-root", "allow")  # fmt: skip
    # git-multibranch's solve.sh ends with `tmux new -d ...` under `set -e`; the image has no
    # tmux, so the oracle exits 127 (an agent error, still graded).
    assert rewards(records) == {
        "git-multibranch": ("agent_error", 0.0),
        "nginx-request-logging": ("completed", 0.0),
    }, result
    [error] = records["git-multibranch"]["errors"]
    assert "tmux: command not found" in error["last_error"], error
    killed = {
        name: " ".join(
            p["cmdline"]
            for event in record["events"]
            if event["type"] == "survivors"
            for p in event["processes"]
        )
        for name, record in records.items()
    }
    assert "sshd" in killed["git-multibranch"] and "nginx" in killed["git-multibranch"], killed
    assert "nginx: master" in killed["nginx-request-logging"], killed
    outcome = outcomes(e2e, tmp_path / "runs", records["nginx-request-logging"])
    assert outcome == {
        **{name: "passed" for name in NGINX_OFFLINE},
        **{name: "failed" for name in NGINX_ONLINE},
    }, outcome
