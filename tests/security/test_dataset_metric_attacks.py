"""A dataset's ``metric.py`` is hostile code: it runs in a sandbox, and its answer is data.

A registry names a metric script; the harness runs it over the run's ``rewards.jsonl``
(:mod:`harness.runner.dataset_metrics`). Each attack here is a real script run in a real
sandbox (local as root, docker with runc, docker with gVisor), judged from outside: a host
file it reads is never in what comes back, a host path it writes is never created, a host
listener it dials is never reached, it runs as no uid of the harness; what it does wrong
(fork bomb, endless loop, floods, ``NaN``, strings) is the metric's recorded ``error``, and
``summary.json`` is still written with every trial's record intact.
"""

from __future__ import annotations

import json
import secrets
import socket
import subprocess
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import RUN_LABEL, backend_engine, remove_labelled
from support.cli import harness

from harness.config import RunConfig
from harness.runner import dataset_metrics
from harness.runner.dataset_metrics import MetricScriptError, run_script

ROWS: list[dict[str, float] | None] = [{"reward": 1.0}, None, {"reward": 0.0}]

#: What every script starts with: Harbor's arguments.
PROLOGUE = """\
import json, os, socket, sys
args = sys.argv[1:]
out = args[args.index("-o") + 1]
rows = [json.loads(line) for line in open(args[args.index("-i") + 1])]
"""


@pytest.fixture
def metric_config(request: pytest.FixtureRequest, backend: str) -> Iterator[tuple[RunConfig, str]]:
    """The run config of the test's backend and a run name; teardown removes its objects."""
    sandbox, runtime, client = backend_engine(request, backend)
    name = f"sec-metric-{secrets.token_hex(4)}"
    config = RunConfig(paths=["/t"], agent="nop", sandbox=sandbox, runtime=runtime)
    yield config, name
    if client is not None:
        remove_labelled(client, f"{RUN_LABEL}={name}")


def _run(metric_config: tuple[RunConfig, str], body: str) -> dict[str, float]:
    config, name = metric_config
    return run_script(config, name, (PROLOGUE + body).encode(), ROWS)


class Listener:
    """A TCP listener on every host address: counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("0.0.0.0", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()
        self.thread.join(timeout=5)


def _host_addresses() -> list[str]:
    """The host's IPv4 addresses (loopback, its interfaces, the docker bridge)."""
    found = {"127.0.0.1"}
    done = subprocess.run(["hostname", "-I"], capture_output=True, text=True, check=False)
    found.update(a for a in done.stdout.split() if ":" not in a)
    found.add("172.17.0.1")
    return sorted(found)


def test_a_metric_script_reads_no_host_file_and_runs_as_no_harness_uid(
    backend: str, metric_config: tuple[RunConfig, str], tmp_path: Path
) -> None:
    secret = tmp_path / "host-secret.txt"
    secret.write_text("HOST-SECRET-" + secrets.token_hex(8))
    secret.chmod(0o644)
    targets = [str(secret), "/etc/shadow", "/root/.bashrc", "/var/run/docker.sock", str(Path.cwd())]
    value = _run(
        metric_config,
        f"targets = {targets!r}\n"
        "read = 0\n"
        "for path in targets:\n"
        "    try:\n"
        "        if os.path.isdir(path):\n"
        "            read += len(os.listdir(path))\n"
        "        else:\n"
        "            read += len(open(path, 'rb').read())\n"
        "    except OSError:\n"
        "        pass\n"
        "    try:\n"
        "        s = socket.socket(socket.AF_UNIX); s.connect(path); read += 1000\n"
        "    except OSError:\n"
        "        pass\n"
        "json.dump({'read': read, 'uid': os.getuid(), 'rows': len(rows)}, open(out, 'w'))\n",
    )
    assert value["rows"] == 3  # it ran, over the run's rewards.jsonl
    assert value["read"] == 0, f"the script reached {value['read']} bytes of host files"
    assert value["uid"] not in (0, __import__("os").getuid())


def test_a_metric_script_writes_nothing_outside_its_sandbox(
    backend: str, metric_config: tuple[RunConfig, str], tmp_path: Path
) -> None:
    open_dir = tmp_path / "open"
    open_dir.mkdir()
    open_dir.chmod(0o777)
    canaries = [open_dir / "canary", Path("/tmp") / f"metric-canary-{secrets.token_hex(4)}"]
    try:
        value = _run(
            metric_config,
            f"paths = {[str(p) for p in canaries]!r}\n"
            "wrote = 0\n"
            "for path in paths:\n"
            "    try:\n"
            "        os.makedirs(os.path.dirname(path), exist_ok=True)\n"
            "        open(path, 'w').write('x'); wrote += 1\n"
            "    except OSError:\n"
            "        pass\n"
            "json.dump({'wrote_inside': wrote}, open(out, 'w'))\n",
        )
        assert "wrote_inside" in value
        for canary in canaries:
            assert not canary.exists(), f"the script wrote {canary} on the host"
    finally:
        for canary in canaries:
            canary.unlink(missing_ok=True)


def test_a_metric_script_reaches_no_host_listener(
    backend: str, metric_config: tuple[RunConfig, str]
) -> None:
    listener = Listener()
    try:
        addresses = _host_addresses()
        value = _run(
            metric_config,
            f"reached = 0\nfor host in {addresses!r}:\n"
            "    try:\n"
            f"        socket.create_connection((host, {listener.port}), timeout=2).close()\n"
            "        reached += 1\n"
            "    except OSError:\n"
            "        pass\n"
            "try:\n"
            "    socket.create_connection(('1.1.1.1', 53), timeout=2).close(); reached += 100\n"
            "except OSError:\n"
            "    pass\n"
            "json.dump({'reached': reached}, open(out, 'w'))\n",
        )
    finally:
        listener.close()
    assert listener.accepted == 0, "a metric script reached a host listener"
    assert value == {"reached": 0.0}


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        pytest.param(
            "while True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n",
            "ran past|exhaust its limits",  # gVisor stops the whole sandbox
            id="fork-bomb",
        ),
        pytest.param("while True:\n    pass\n", "ran past", id="endless-loop"),
        pytest.param(
            "chunk = b'x' * (1 << 20)\nfor _ in range(100):\n    sys.stdout.buffer.write(chunk)\n"
            "json.dump({'a': NAN}, open(out, 'w'))\n".replace("NAN", "float('nan')"),
            "finite",
            id="100MB-stdout-then-nan",
        ),
        pytest.param(
            "f = open(out, 'w')\nf.write('{\"a\": ' + '1' * (100 << 20) + '}')\n",
            "larger than",
            id="100MB-metric-json",
        ),
        pytest.param("json.dump({'a': 'high'}, open(out, 'w'))\n", "not a number", id="string"),
        pytest.param("open(out, 'w').write('garbage')\n", "not JSON", id="garbage"),
        pytest.param(
            "os.symlink('/etc/passwd', out)\n", "no metric.json", id="metric-json-is-a-link"
        ),
        pytest.param("sys.exit(3)\n", "exit 3", id="failure"),
    ],
)
def test_a_misbehaving_metric_script_is_a_recorded_error(
    backend: str,
    metric_config: tuple[RunConfig, str],
    monkeypatch: pytest.MonkeyPatch,
    body: str,
    expected: str,
) -> None:
    monkeypatch.setattr(dataset_metrics, "SCRIPT_TIMEOUT_SEC", 5.0)
    with pytest.raises(MetricScriptError, match=expected):
        _run(metric_config, body)


# --------------------------------------------------------------------------- a whole run


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t", *args],
        cwd=repo, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


def _dataset(tmp_path: Path, scripts: dict[str, str]) -> Path:
    """A git repository of two tasks and a registry naming ``scripts`` as its metrics."""
    repo = tmp_path / "repo"
    (repo / "tasks").mkdir(parents=True)
    _git(repo, "init", "-q", "-b", "main")
    for name in ("alpha", "beta"):
        task = repo / "tasks" / name
        (task / "tests").mkdir(parents=True)
        (task / "task.toml").write_text(f'[task]\nname = "m/{name}"\n\n[agent]\ntimeout_sec = 30\n')
        (task / "instruction.md").write_text("Nothing to do.\n")
        reward = "1" if name == "alpha" else "0"
        (task / "tests" / "test.sh").write_text(
            f'#!/bin/bash\necho {reward} > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
        )
        (task / "tests" / "test.sh").chmod(0o755)
    _git(repo, "add", "-A")
    _git(repo, "commit", "-q", "-m", "tasks")
    commit = _git(repo, "rev-parse", "HEAD")
    registry = tmp_path / "registry"
    registry.mkdir()
    metrics: list[dict[str, Any]] = [{"type": "mean"}]
    for name, body in scripts.items():
        (registry / f"{name}.py").write_text(PROLOGUE + body)
        metrics.append({"type": "uv-script", "name": name, "kwargs": {"script_path": f"{name}.py"}})
    tasks = [
        {"name": n, "git_url": str(repo), "git_commit_id": commit, "path": f"tasks/{n}"}
        for n in ("alpha", "beta")
    ]
    (registry / "registry.json").write_text(
        json.dumps([{"name": "m", "version": "1", "tasks": tasks, "metrics": metrics}])
    )
    return registry / "registry.json"


def test_a_run_whose_metric_scripts_misbehave_writes_its_summary_and_every_record(
    backend: str, request: pytest.FixtureRequest, tmp_path: Path
) -> None:
    sandbox, runtime, client = backend_engine(request, backend)
    registry = _dataset(
        tmp_path,
        {
            "good": "json.dump({'solved': sum(1 for r in rows if r and r['reward'] >= 1)}, "
            "open(out, 'w'))\n",
            "nan": "json.dump({'a': float('nan')}, open(out, 'w'))\n",
            "fails": "raise SystemExit(2)\n",
        },
    )
    output = tmp_path / "runs"
    argv = ["run", "-d", "m@1", "--registry-path", str(registry), "--agent", "nop"]
    argv += ["--sandbox", sandbox, *(["--runtime", runtime] if runtime else []), "-o", str(output)]
    env = {"HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    try:
        done = harness(*argv, env=env, timeout=300)
        run_dirs = list(output.iterdir())
        assert len(run_dirs) == 1, done.stdout + done.stderr
        summary = json.loads((run_dirs[0] / "summary.json").read_text())
        records = [
            json.loads(line) for line in (run_dirs[0] / "trials.jsonl").read_text().splitlines()
        ]
    finally:
        if client is not None and output.exists():
            for run_dir in output.iterdir():
                remove_labelled(client, f"{RUN_LABEL}={run_dir.name}")
    assert done.returncode == 0, done.stdout + done.stderr
    assert sorted(r["reward"] for r in records) == [0.0, 1.0]
    assert all(r["attempt"] == 1 for r in records)
    assert summary["mean_reward"] == 0.5
    metrics = summary["dataset_metrics"]
    assert metrics["mean"]["value"] == 0.5 and metrics["mean"]["trials_counted"] == 2
    assert metrics["good"] == {
        "type": "uv-script",
        "source": "script",
        "dataset": "m@1",
        "value": {"solved": 1.0},
        "trials_counted": 2,
        "graded": 2,
        "ungraded": 0,
        "error": None,
    }
    assert metrics["nan"]["value"] is None and "finite" in metrics["nan"]["error"]
    assert metrics["fails"]["value"] is None and "exit 2" in metrics["fails"]["error"]


@pytest.mark.root
def test_a_task_sets_metric_py_linked_to_a_host_file_is_never_read_or_run(tmp_path: Path) -> None:
    secret = tmp_path / "host-secret.py"
    token = "HOST-SECRET-" + secrets.token_hex(8)
    secret.write_text(f"# {token}\nopen('/tmp/ran', 'w')\n")
    task_set = tmp_path / "set"
    task = task_set / "alpha"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text('[task]\nname = "m/alpha"\n\n[agent]\ntimeout_sec = 30\n')
    (task / "instruction.md").write_text("Nothing to do.\n")
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\necho 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    (task / "tests" / "test.sh").chmod(0o755)
    (task_set / "metric.py").symlink_to(secret)
    output = tmp_path / "runs"
    env = {"HARNESS_CACHE_DIR": str(tmp_path / "cache")}
    done = harness("run", task_set, "--agent", "nop", "--sandbox", "local", "-o", output, env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    [run_dir] = list(output.iterdir())
    metric = json.loads((run_dir / "summary.json").read_text())["dataset_metrics"]["uv-script"]
    assert metric["value"] is None and "link" in metric["error"]
    assert metric["dataset"] == "set@local" and metric["trials_counted"] == 1
    leaked = [p for p in run_dir.rglob("*") if p.is_file() and token.encode() in p.read_bytes()]
    cached = [
        p
        for p in (tmp_path / "cache").rglob("*")
        if p.is_file() and token.encode() in p.read_bytes()
    ]
    assert leaked == [] and cached == []
