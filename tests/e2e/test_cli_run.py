"""End-to-end: ``harness run`` as a real subprocess (docs/run-dir.md, docs/errors.md).

Happy paths on the example tasks, the run dir contract, rollouts / selection / concurrency,
the command agent, and agents or verifiers that misbehave (recorded, the run goes on).
"""

from __future__ import annotations

import math
import os
import re
import secrets
import shutil
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

RUN_NAME = re.compile(r"^tasks--none--(?P<agent>[a-z]+)--[0-9a-f]{8}$")
STATUSES = {
    "completed",
    "agent_timeout",
    "agent_error",
    "environment_error",
    "verifier_error",
    "cancelled",
}
RECORD_FIELDS = (
    "id",
    "task",
    "agent",
    "sandbox",
    "attempt",
    "status",
    "ok",
    "reward",
    "rewards",
    "errors",
    "timings",
    "usage",
    "versions",
    "started_at",
    "finished_at",
)
MAX_LOG_BYTES = (4 << 20) + (64 << 10)  # the 4 MiB output cap plus a little slack


def _when(text: str) -> datetime:
    return datetime.fromisoformat(text.replace("Z", "+00:00"))


def _statuses(run: Any) -> list[str]:
    return sorted(r["status"] for r in run.records)


def _every_file(top: Path) -> list[Path]:
    found = []
    for dirpath, _dirs, files in os.walk(top, followlinks=False):
        found.extend(Path(dirpath) / name for name in files)
    return found


def _live_cmdlines_containing(token: str) -> list[str]:
    hits = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        text = raw.replace(b"\0", b" ").decode("utf-8", "replace")
        if token in text:
            hits.append(f"{entry.name}: {text}")
    return hits


# --------------------------------------------------------------------------- happy paths


@pytest.fixture(scope="module")
def canary() -> str:
    return f"sk-canary-{secrets.token_hex(12)}"


@pytest.fixture(scope="module")
def oracle_run(e2e: Any, tmp_path_factory: pytest.TempPathFactory, canary: str) -> Any:
    out = tmp_path_factory.mktemp("oracle-out")
    result = e2e.run(
        "run", e2e.EXAMPLES, "--agent", "oracle", "-o", out, "--json",
        env={"OPENAI_API_KEY": canary},
    )  # fmt: skip
    return out, result


def test_oracle_solves_every_example(oracle_run: Any) -> None:
    _out, result = oracle_run
    assert result.code == 0, result
    data = result.json()
    assert data["trials"] == 4
    assert data["graded"] == 4
    assert data["success_rate"] == 1.0
    assert data["mean_reward"] == 1.0
    assert data["errors_by_status"] == {}


def test_nop_scores_zero_and_still_exits_zero(e2e: Any, tmp_path: Path) -> None:
    """Low rewards are data, not failures (docs/errors.md)."""
    result = e2e.run("run", e2e.EXAMPLES, "--agent", "nop", "-o", tmp_path, "--json")
    assert result.code == 0, result
    data = result.json()
    assert data["success_rate"] == 0.0
    assert data["mean_reward"] == 0.0
    assert data["graded"] == 4
    run = e2e.read_run(e2e.only_run_dir(tmp_path))
    assert RUN_NAME.match(run.path.name).group("agent") == "nop"
    assert [r["status"] for r in run.records] == ["completed"] * 4
    assert all(r["ok"] and r["reward"] == 0.0 for r in run.records)


def test_run_dir_layout(oracle_run: Any, e2e: Any) -> None:
    out, result = oracle_run
    assert result.code == 0, result
    run_dir = e2e.only_run_dir(out)
    match = RUN_NAME.match(run_dir.name)
    assert match, f"run dir name {run_dir.name!r} is not <taskset>--none--<agent>--<8 hex>"
    assert match.group("agent") == "oracle"
    assert Path(result.json()["run_dir"]).resolve() == run_dir.resolve()
    for name in ("config.toml", "trials.jsonl", "summary.json", "eval.log"):
        assert (run_dir / name).is_file(), f"{name} missing from {run_dir}"

    run = e2e.read_run(run_dir)
    assert run.config["run"]["agent"]["name"] == "oracle"
    assert run.config["run"]["rollouts"] == 1
    assert run.config["run"]["sandbox"]["backend"] == "local"

    assert len(run.records) == 4
    assert len({r["id"] for r in run.records}) == 4
    assert sorted(run.by_task()) == sorted(e2e.EXAMPLE_KEYS)
    for record in run.records:
        missing = [f for f in RECORD_FIELDS if f not in record]
        assert not missing, f"record {record.get('id')} lacks {missing}"
        assert set(record["task"]) >= {"name", "key", "hash", "path"}
        assert re.fullmatch(r"[0-9a-f]{64}", record["task"]["hash"])
        assert Path(record["task"]["path"]).is_dir()
        assert record["agent"]["name"] == "oracle"
        assert record["sandbox"]["backend"] == "local"
        assert record["attempt"] >= 1
        assert record["status"] == "completed"
        assert record["ok"] is True
        assert record["reward"] == 1.0
        assert isinstance(record["rewards"], dict) and record["rewards"]
        assert record["errors"] == []
        assert all(isinstance(v, int | float) and v >= 0 for v in record["timings"].values())
        assert isinstance(record["usage"], dict)
        assert record["versions"].get("harness")
        assert _when(record["started_at"]) <= _when(record["finished_at"])

        evidence = run.evidence(record)
        assert evidence.is_dir(), f"no evidence dir for {record['id']}"
        assert (evidence / "agent.log").is_file()
        assert (evidence / "verifier" / "test-stdout.txt").is_file()
        rewards = [p.name for p in (evidence / "verifier").glob("reward.*")]
        assert rewards, f"no verifier/reward.* in {evidence}"

    summary = run.summary
    assert summary["trials"] == 4
    assert summary["mean_reward"] == 1.0
    assert summary["success_rate"] == 1.0
    assert summary["pass_at_k"] == {"1": 1.0}
    assert summary["errors_by_status"] == {}

    log = (run_dir / "eval.log").read_text()
    for record in run.records:
        assert record["id"] in log


def test_no_secret_in_the_run_dir(oracle_run: Any, e2e: Any, canary: str) -> None:
    out, result = oracle_run
    assert result.code == 0, result
    assert canary not in result.stdout and canary not in result.stderr
    files = _every_file(out)
    assert len(files) > 10
    leaks = [str(p) for p in files if canary.encode() in p.read_bytes()]
    assert not leaks, f"the API key canary leaked into {leaks}"


def test_agent_that_dumps_its_env_sees_no_secret(e2e: Any, tmp_path: Path) -> None:
    canary = f"sk-canary-{secrets.token_hex(12)}"
    task = e2e.make_task(tmp_path / "set", "env-dump")
    out = tmp_path / "out"
    result = e2e.run(
        "run", task, "--agent", "command",
        "--agent-cmd", "bash -c 'env; env > env.txt; cat /proc/self/environ > environ.bin'",
        "-o", out, "--json",
        env={"OPENAI_API_KEY": canary, "ANTHROPIC_API_KEY": canary + "-b"},
    )  # fmt: skip
    assert result.code == 0, result
    run = e2e.read_run(e2e.only_run_dir(out))
    workspace = run.evidence(run.records[0]) / "workspace"
    assert "HARNESS_WORKSPACE" in (workspace / "env.txt").read_text()
    leaks = [str(p) for p in _every_file(out) if canary.encode() in p.read_bytes()]
    assert not leaks, f"the API key canary leaked into {leaks}"
    assert canary not in result.stdout + result.stderr


# --------------------------------------------------------------------------- rollouts etc.


def _flaky_set(e2e: Any, parent: Path) -> Path:
    """Two tasks: ``always`` scores 1; ``first-only`` scores 1 on rollout 0 only."""
    root = parent / "flaky"
    e2e.make_task(
        root,
        "always",
        test_sh='#!/bin/bash\nsleep 0.3\necho 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n',
    )
    e2e.make_task(
        root,
        "first-only",
        test_sh=(
            "#!/bin/bash\nsleep 0.3\n"
            'case "$HARNESS_TRIAL_ID" in *.r0) r=1 ;; *) r=0 ;; esac\n'
            'echo "$r" > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
        ),
    )
    return root


@pytest.fixture(scope="module")
def flaky_runs(e2e: Any, tmp_path_factory: pytest.TempPathFactory) -> dict[int, Any]:
    base = tmp_path_factory.mktemp("flaky")
    tasks = _flaky_set(e2e, base)
    runs = {}
    for jobs in (1, 4):
        out = base / f"out-j{jobs}"
        result = e2e.run("run", tasks, "--agent", "nop", "-r", "3", "-j", str(jobs), "-o", out)
        assert result.code == 0, result
        runs[jobs] = e2e.read_run(e2e.only_run_dir(out))
    return runs


def test_rollouts_give_three_trials_per_task_and_pass_at_k(flaky_runs: dict[int, Any]) -> None:
    run = flaky_runs[1]
    assert len(run.records) == 6
    by_task = run.by_task()
    assert sorted(by_task) == ["e2e/always", "e2e/first-only"]
    for records in by_task.values():
        assert len(records) == 3
        assert sorted(r["rollout"] for r in records) == [0, 1, 2]
    assert len({r["id"] for r in run.records}) == 6
    summary = run.summary
    assert summary["trials"] == 6
    assert set(summary["pass_at_k"]) == {"1", "2", "3"}
    # always: n=3,c=3 → 1, 1, 1; first-only: n=3,c=1 → 1/3, 2/3, 1 (unbiased estimator).
    expected = {"1": (1 + 1 / 3) / 2, "2": (1 + 2 / 3) / 2, "3": 1.0}
    for k, value in expected.items():
        assert math.isclose(summary["pass_at_k"][k], value, abs_tol=1e-9), (k, summary)
    assert math.isclose(summary["mean_reward"], 4 / 6, abs_tol=1e-9)


def test_concurrency_gives_the_same_results(flaky_runs: dict[int, Any]) -> None:
    def outcome(run: Any) -> dict[str, tuple[Any, ...]]:
        return {
            r["id"]: (r["task"]["key"], r["task"]["hash"], r["status"], r["reward"], r["rewards"])
            for r in run.records
        }

    serial, parallel = flaky_runs[1], flaky_runs[4]
    assert outcome(parallel) == outcome(serial)
    for key in ("trials", "mean_reward", "success_rate", "pass_at_k", "errors_by_status"):
        assert parallel.summary[key] == serial.summary[key], key
    assert parallel.config["run"]["concurrency"] == 4

    def overlaps(run: Any) -> int:
        spans = sorted((_when(r["started_at"]), _when(r["finished_at"])) for r in run.records)
        return sum(1 for a, b in zip(spans, spans[1:], strict=False) if b[0] < a[1])

    assert overlaps(serial) == 0
    assert overlaps(parallel) > 0, "-j 4 never ran two trials at once"


def test_num_tasks_runs_the_first_n(e2e: Any, tmp_path: Path) -> None:
    result = e2e.run("run", e2e.EXAMPLES, "--agent", "nop", "-n", "2", "-o", tmp_path, "--json")
    assert result.code == 0, result
    assert result.json()["tasks"] == 2
    run = e2e.read_run(e2e.only_run_dir(tmp_path))
    assert [r["task"]["key"] for r in run.records] == list(e2e.EXAMPLE_KEYS[:2])


def test_shuffle_is_seeded(e2e: Any, tmp_path: Path) -> None:
    def order(seed: int, n: int, tag: str) -> list[str]:
        out = tmp_path / f"seed{seed}-n{n}-{tag}"
        result = e2e.run(
            "run", e2e.EXAMPLES, "--agent", "nop", "--shuffle", "--seed", str(seed),
            "-n", str(n), "-o", out,
        )  # fmt: skip
        assert result.code == 0, result
        run = e2e.read_run(e2e.only_run_dir(out))
        assert run.config["run"]["tasks"]["seed"] == seed
        assert run.config["run"]["tasks"]["shuffle"] is True
        return [r["task"]["key"] for r in run.records]

    runs = [(1, 1, "a"), (1, 1, "b"), (2, 1, "a"), (1, 4, "a"), (2, 4, "a")]
    with ThreadPoolExecutor(max_workers=len(runs)) as pool:
        one_a, one_b, two, full_1, full_2 = pool.map(lambda args: order(*args), runs)
    assert len(one_a) == len(two) == 1
    assert one_a == one_b, "the same seed picked different tasks"
    assert set(one_a + two) <= set(e2e.EXAMPLE_KEYS)
    assert sorted(full_1) == sorted(full_2) == sorted(e2e.EXAMPLE_KEYS)
    # -n takes a prefix of the seeded order, and seeds 1 and 2 order the four tasks differently.
    assert full_1[:1] == one_a and full_2[:1] == two
    assert full_1 != full_2


def test_fail_under(e2e: Any, tmp_path: Path) -> None:
    nop = e2e.run("run", e2e.EXAMPLES, "--agent", "nop", "--fail-under", "0.5", "-o", tmp_path)
    assert nop.code == 1, nop
    run = e2e.read_run(e2e.only_run_dir(tmp_path))
    assert len(run.records) == 4 and all(r["ok"] for r in run.records)

    oracle_out = tmp_path / "oracle"
    oracle = e2e.run(
        "run", e2e.EXAMPLES, "--agent", "oracle", "-n", "1", "--fail-under", "0.5",
        "-o", oracle_out,
    )  # fmt: skip
    assert oracle.code == 0, oracle


# --------------------------------------------------------------------------- command agent

INSTRUCTION = "Line one of the e2e instruction.\nSecond line: {not a placeholder}\n"


def test_command_agent_gets_the_instruction_on_stdin(e2e: Any, tmp_path: Path) -> None:
    task = e2e.make_task(tmp_path / "set", "stdin", instruction=INSTRUCTION)
    out = tmp_path / "out"
    result = e2e.run(
        "run", task, "--agent", "command", "--agent-cmd", "bash -c 'cat > out.txt'",
        "-o", out, "--json",
    )  # fmt: skip
    assert result.code == 0, result
    run = e2e.read_run(e2e.only_run_dir(out))
    (record,) = run.records
    assert record["agent"]["name"] == "command"
    copy = run.evidence(record) / "workspace" / "out.txt"
    assert copy.read_text() == INSTRUCTION


def test_command_agent_placeholders(e2e: Any, tmp_path: Path) -> None:
    task = e2e.make_task(tmp_path / "set", "placeholders", instruction=INSTRUCTION)
    out = tmp_path / "out"
    script = (
        'cp "$1" "$2/copy.md"; printf %s "$2" > ws.txt; '
        'printf %s "$HARNESS_WORKSPACE" > env-ws.txt; echo {{literal}} > lit.txt'
    )
    result = e2e.run(
        "run", task, "--agent", "command",
        "--agent-cmd", f"bash -c '{script}' agent {{instruction_file}} {{workspace}}",
        "-o", out, "--json",
    )  # fmt: skip
    assert result.code == 0, result
    run = e2e.read_run(e2e.only_run_dir(out))
    (record,) = run.records
    assert record["status"] == "completed", record["errors"]
    workspace = run.evidence(record) / "workspace"
    assert (workspace / "copy.md").read_text() == INSTRUCTION
    ws = (workspace / "ws.txt").read_text()
    assert ws.startswith("/") and ws == (workspace / "env-ws.txt").read_text()
    assert (workspace / "lit.txt").read_text() == "{literal}\n"


def test_command_agent_can_solve_a_task(e2e: Any, tmp_path: Path) -> None:
    result = e2e.run(
        "run", e2e.EXAMPLES / "hello-file", "--agent", "command",
        "--agent-cmd", "bash -c 'printf \"Hello, world!\" > {workspace}/hello.txt'",
        "-o", tmp_path, "--json",
    )  # fmt: skip
    assert result.code == 0, result
    assert result.json()["mean_reward"] == 1.0


# --------------------------------------------------------------------------- misbehaving agents


def test_crashing_agent_is_recorded_and_the_run_goes_on(e2e: Any, tmp_path: Path) -> None:
    result = e2e.run(
        "run", e2e.EXAMPLES, "--agent", "command", "--agent-cmd",
        "bash -c 'echo crashing-now; exit 3'", "-o", tmp_path, "--json",
    )  # fmt: skip
    assert result.code == 1, result
    assert result.json()["errors_by_status"] == {"agent_error": 4}
    run = e2e.read_run(e2e.only_run_dir(tmp_path))
    assert len(run.records) == 4
    for record in run.records:
        assert record["status"] == "agent_error"
        assert record["ok"] is False
        assert any("3" in e["message"] for e in record["errors"]), record["errors"]
        assert "crashing-now" in (run.evidence(record) / "agent.log").read_text()


@pytest.mark.parametrize(
    "command",
    [
        "bash -c 'echo started; exec sleep 29.{tag}'",
        # A background child that keeps stdout open must not keep the run waiting either.
        "bash -c 'sleep 28.{tag} & echo started; sleep 29.{tag}'",
    ],
    ids=["sleep", "sleep-with-background-child"],
)
def test_hanging_agent_times_out(e2e: Any, tmp_path: Path, command: str) -> None:
    tag = str(secrets.randbelow(10**6)).zfill(6)
    root = tmp_path / "set"
    for name in ("hang-a", "hang-b"):
        e2e.make_task(root, name, agent_timeout=2, test_sh=e2e.TEST_SH_ZERO)
    out = tmp_path / "out"
    start = time.monotonic()
    result = e2e.run(
        "run", root, "--agent", "command", "--agent-cmd", command.format(tag=tag),
        "-j", "2", "-o", out, "--json", timeout=60,
    )  # fmt: skip
    elapsed = time.monotonic() - start
    assert result.code == 1, result
    assert elapsed < 30, f"the run took {elapsed:.1f}s for a 2 s agent timeout"
    run = e2e.read_run(e2e.only_run_dir(out))
    assert len(run.records) == 2
    for record in run.records:
        assert record["status"] == "agent_timeout", record["errors"]
        assert record["ok"] is False
        assert any("2" in e["message"] for e in record["errors"]), record["errors"]
        assert "started" in (run.evidence(record) / "agent.log").read_text()
    assert result.json()["errors_by_status"] == {"agent_timeout": 2}
    assert not _live_cmdlines_containing(f".{tag}"), "agent processes outlived the run"


@pytest.mark.parametrize(
    ("command", "log"),
    [
        ("bash -c 'yes | head -c 100000000'", "agent.log"),
        ("bash -c 'yes | head -c 100000000 >&2'", "agent.stderr.log"),
    ],
    ids=["stdout", "stderr"],
)
def test_flooding_agent_output_is_capped(e2e: Any, tmp_path: Path, command: str, log: str) -> None:
    task = e2e.make_task(tmp_path / "set", "flood", agent_timeout=20)
    out = tmp_path / "out"
    result = e2e.run("run", task, "--agent", "command", "--agent-cmd", command, "-o", out, "--json")
    assert result.code in (0, 1), result
    run = e2e.read_run(e2e.only_run_dir(out))
    (record,) = run.records
    assert record["status"] in ("completed", "agent_error"), record["errors"]
    evidence = run.evidence(record) / log
    assert evidence.is_file()
    size = evidence.stat().st_size
    assert 0 < size <= MAX_LOG_BYTES, f"{log} is {size} bytes"
    total = sum(p.stat().st_size for p in _every_file(run.path))
    assert total <= 3 * MAX_LOG_BYTES, f"the run dir holds {total} bytes"


# --------------------------------------------------------------------------- verifiers


def test_broken_verifiers_are_verifier_errors(e2e: Any, tmp_path: Path) -> None:
    root = tmp_path / "set"
    e2e.make_task(root, "no-reward", test_sh="#!/bin/bash\necho graded nothing\n")
    e2e.make_task(
        root, "not-a-number", test_sh='#!/bin/bash\necho abc > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    e2e.make_task(
        root,
        "bad-json",
        test_sh='#!/bin/bash\necho \'{"reward": "high"}\' > "$HARNESS_VERIFIER_DIR/reward.json"\n',
    )
    out = tmp_path / "out"
    result = e2e.run("run", root, "--agent", "nop", "-j", "3", "-o", out, "--json")
    assert result.code == 1, result
    assert result.json()["errors_by_status"] == {"verifier_error": 3}
    run = e2e.read_run(e2e.only_run_dir(out))
    by_task = {key: records[0] for key, records in run.by_task().items()}
    assert len(by_task) == 3
    for record in by_task.values():
        assert record["status"] == "verifier_error", record["errors"]
        assert record["reward"] is None
        assert record["ok"] is False

    def message(key: str) -> str:
        return " ".join(e["message"] for e in by_task[key]["errors"])

    assert "reward.json" in message("e2e/no-reward")
    assert "reward.txt" in message("e2e/no-reward")
    assert "reward.txt" in message("e2e/not-a-number")
    assert "does not hold a number" in message("e2e/not-a-number")
    assert "reward.json" in message("e2e/bad-json")


def test_verifier_timeout_is_a_verifier_error(e2e: Any, tmp_path: Path) -> None:
    task = e2e.make_task(
        tmp_path / "set",
        "slow-verifier",
        toml='[task]\nname = "e2e/slow-verifier"\n\n[verifier]\ntimeout_sec = 1\n',
        test_sh='#!/bin/bash\nsleep 20\necho 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n',
    )
    out = tmp_path / "out"
    start = time.monotonic()
    result = e2e.run("run", task, "--agent", "nop", "-o", out, "--json", timeout=60)
    assert time.monotonic() - start < 30
    assert result.code == 1, result
    run = e2e.read_run(e2e.only_run_dir(out))
    (record,) = run.records
    assert record["status"] == "verifier_error", record["errors"]
    assert record["reward"] is None
    assert "timed out" in " ".join(e["message"] for e in record["errors"]), record["errors"]


PLANT_SH = r"""#!/bin/bash
# Plant a winning reward everywhere this agent can write, and leave a process behind that
# keeps trying to plant one into the verifier dir once it appears.
R=$(dirname "$HARNESS_WORKSPACE")
for d in "$PWD" "$HARNESS_WORKSPACE" "$HOME" "${TMPDIR:-/tmp}" "$R" "$R/verifier" "$R/logs" \
         "$R/session" "$R/artifacts" "$R/tests" /logs/verifier /tmp /var/tmp /dev/shm; do
    mkdir -p "$d" 2>/dev/null
    echo 1 > "$d/reward.txt" 2>/dev/null
    echo '{"reward": 1}' > "$d/reward.json" 2>/dev/null
done
nohup setsid bash -c '
    for i in $(seq 300); do
        echo "{\"reward\": 1}" > "$0/verifier/reward.json"
        echo 1 > "$0/verifier/reward.txt"
        sleep 0.01
    done' "$R" >/dev/null 2>&1 &
exit 0
"""


def test_planted_rewards_do_not_count(e2e: Any, tmp_path: Path) -> None:
    root = tmp_path / "set"
    e2e.make_task(
        root,
        "tests-write-zero",
        workspace={"plant.sh": PLANT_SH},
        test_sh='#!/bin/bash\nsleep 1\necho 0 > "$HARNESS_VERIFIER_DIR/reward.txt"\n',
    )
    e2e.make_task(
        root,
        "tests-write-nothing",
        workspace={"plant.sh": PLANT_SH},
        test_sh="#!/bin/bash\nsleep 1\n",
    )
    shared = [
        Path(d) / name
        for d in ("/tmp", "/var/tmp", "/dev/shm")
        for name in ("reward.txt", "reward.json")
    ]
    before = {p for p in shared if p.exists()}
    out = tmp_path / "out"
    try:
        result = e2e.run(
            "run", root, "--agent", "command", "--agent-cmd", "bash plant.sh", "-j", "2",
            "-o", out, "--json",
        )  # fmt: skip
    finally:
        for path in shared:
            if path not in before and path.exists() and path.stat().st_uid != 0:
                path.unlink()
    assert result.code == 1, result
    run = e2e.read_run(e2e.only_run_dir(out))
    by_task = {key: records[0] for key, records in run.by_task().items()}
    zero = by_task["e2e/tests-write-zero"]
    assert zero["status"] == "completed", zero["errors"]
    assert zero["reward"] == 0.0
    assert zero["rewards"] == {"reward": 0.0}
    assert (run.evidence(zero) / "workspace" / "reward.txt").is_file(), "the agent did not plant"
    # The planter left a process behind: it is recorded as evidence and was killed before grading.
    assert any(e.get("type") == "survivors" for e in zero["events"]), zero["events"]
    nothing = by_task["e2e/tests-write-nothing"]
    assert nothing["status"] == "verifier_error", nothing["errors"]
    assert nothing["reward"] is None
    assert result.json()["mean_reward"] == 0.0


# --------------------------------------------------------------------------- concurrent runs


@pytest.fixture(scope="module", params=["shared-tmpdir", "separate-tmpdirs"])
def two_concurrent_runs(
    request: pytest.FixtureRequest, e2e: Any, tmp_path_factory: pytest.TempPathFactory
) -> Any:
    """Run A (a slow agent next to a seeded secret) and, while A's agent runs, run B.

    B's agent tries to read a file in A's workspace (its path is easy to find: trial roots
    sit in the harness's temp dir). Two `harness run` processes on one host are common (CI
    shards, parallel sweeps, users with different TMPDIRs), so each must isolate its trials
    from the other's: different sandbox uids, whatever each process's TMPDIR is.
    """
    base = tmp_path_factory.mktemp("two-runs")
    tag = str(secrets.randbelow(10**6)).zfill(6)
    token = f"victim-token-{secrets.token_hex(8)}"
    victim = e2e.make_task(
        base / "a", "victim", agent_timeout=30, workspace={"victim-secret.txt": token}
    )
    thief = e2e.make_task(base / "b", "thief", agent_timeout=30)
    made: list[str] = []
    if request.param == "separate-tmpdirs":
        # Sandbox users must be able to traverse the temp dir that holds their trial root.
        for _ in range(2):
            made.append(tempfile.mkdtemp(prefix="harness-e2e-tmp-"))
            os.chmod(made[-1], 0o755)
        tmp_a, tmp_b = made
    else:
        tmp_a = tmp_b = tempfile.gettempdir()
    run_a = e2e.start(
        "run", victim, "--agent", "command", "--agent-cmd", f"bash -c 'exec sleep 4.{tag}'",
        "-o", base / "out-a", "--run-name", f"victim-{tag}", "--json", env={"TMPDIR": tmp_a},
    )  # fmt: skip
    try:
        # Local trial roots live in the run's private temp dir, harness-run-<run name>
        # (named for this test: other users' runs may share the temp dir).
        pattern = f"harness-run-victim-{tag}/harness-trial-*/fs/workspace/victim-secret.txt"
        deadline = time.monotonic() + 20
        secret_files: list[Path] = []
        # Wait for A's agent itself (`sleep`), not the harness whose argv also holds the tag.
        while not (
            secret_files
            and any(
                hit.split(": ", 1)[1].startswith("sleep ")
                for hit in _live_cmdlines_containing(f"sleep 4.{tag}")
            )
        ):
            assert run_a.proc.poll() is None, run_a.wait()
            assert time.monotonic() < deadline, "run A's agent never started"
            time.sleep(0.05)
            secret_files = list(Path(tmp_a).glob(pattern))
        (secret_file,) = secret_files
        steal = f"cat {secret_file} > stolen.txt 2> error.txt; true"
        result_b = e2e.run(
            "run", thief, "--agent", "command", "--agent-cmd", f"bash -c '{steal}'",
            "-o", base / "out-b", "--json", env={"TMPDIR": tmp_b},
        )  # fmt: skip
        a_still_running = run_a.proc.poll() is None
        result_a = run_a.wait(60)
    finally:
        run_a.kill()
        for path in made:
            shutil.rmtree(path, ignore_errors=True)
    return {
        "token": token,
        "a": (result_a, e2e.read_run(e2e.only_run_dir(base / "out-a"))),
        "b": (result_b, e2e.read_run(e2e.only_run_dir(base / "out-b"))),
        "a_still_running": a_still_running,
    }


def test_concurrent_runs_do_not_kill_each_others_agents(two_concurrent_runs: Any) -> None:
    result_b, _run_b = two_concurrent_runs["b"]
    assert result_b.code == 0, result_b
    result_a, run_a = two_concurrent_runs["a"]
    (record,) = run_a.records
    assert record["status"] == "completed", (
        f"run B's end-of-phase kill sweep hit run A's agent: {record['errors']}"
    )
    assert two_concurrent_runs["a_still_running"], "run A ended before run B finished"
    assert result_a.code == 0, result_a


def test_concurrent_runs_cannot_read_each_others_workspace(two_concurrent_runs: Any) -> None:
    _result_b, run_b = two_concurrent_runs["b"]
    (record,) = run_b.records
    stolen = run_b.evidence(record) / "workspace" / "stolen.txt"
    assert stolen.is_file(), "the thief agent did not run"
    _result_a, run_a = two_concurrent_runs["a"]
    uids = (run_a.records[0]["sandbox"].get("uid"), record["sandbox"].get("uid"))
    assert two_concurrent_runs["token"] not in stolen.read_text(), (
        f"run B's agent read run A's workspace (sandbox uids of A and B: {uids})"
    )
    assert uids[0] != uids[1], f"two concurrent trials share sandbox uid {uids[0]}"
