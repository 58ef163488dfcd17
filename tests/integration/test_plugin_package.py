"""A third-party plug-in package, installed into a fresh venv, runs a trial by name.

tests/fixtures/plugin-example is a tiny distribution declaring a sandbox backend
(``stamped``) and an agent (``write-answer``) through harness's entry-point groups, the
way the built-ins are declared. It is built and installed with pip into a new venv (offline:
no index, no build isolation); the harness and its dependencies come from the project's
venv through a ``.pth`` file. Then ``python -m harness`` in that venv lists both plug-ins
and runs a real trial with them, selected by name only.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest
from support.workers import uid_base

from harness.plugins import AGENTS, SANDBOXES

PLUGIN = Path(__file__).resolve().parents[1] / "fixtures" / "plugin-example"
UID_BASE = uid_base(62400)

pytestmark = pytest.mark.root


def _run(argv: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "COLUMNS": "200", "NO_COLOR": "1", "TERM": "dumb"}
    env.pop("PYTHONPATH", None)
    return subprocess.run(
        argv, capture_output=True, text=True, timeout=300, env=env, check=False, **kwargs
    )  # type: ignore[call-overload]


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the example plug-in installed by pip; harness from the dev venv."""
    root = tmp_path_factory.mktemp("plugin-venv")
    venv = root / "venv"
    made = _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    assert made.returncode == 0, made.stderr
    python = venv / "bin" / "python"
    purelib = _run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"])
    site = Path(purelib.stdout.strip())
    dev_site = sysconfig.get_paths()["purelib"]
    # addsitedir, not a plain path line: the dev venv's own .pth files (the editable
    # harness) must be processed too.
    (site / "harness_dev_venv.pth").write_text(f"import site; site.addsitedir({dev_site!r})\n")
    source = root / "plugin-src"
    shutil.copytree(PLUGIN, source)  # pip builds in place: keep the fixture clean
    installed = _run(
        [sys.executable, "-m", "pip", "--python", str(python), "install", "--no-index",
         "--no-deps", "--no-build-isolation", "--disable-pip-version-check", str(source)]
    )  # fmt: skip
    assert installed.returncode == 0, installed.stdout + installed.stderr
    return venv


def harness_in(venv: Path, *args: str | Path, cwd: Path) -> subprocess.CompletedProcess[str]:
    return _run([str(venv / "bin" / "python"), "-m", "harness", *map(str, args)], cwd=cwd)


def test_the_plugin_is_not_installed_in_the_project_venv() -> None:
    assert "stamped" not in SANDBOXES.names() and "write-answer" not in AGENTS.names()


def test_installed_plugins_are_listed_with_their_package(venv: Path, tmp_path: Path) -> None:
    sandboxes = harness_in(venv, "sandbox", "list", cwd=tmp_path)
    assert sandboxes.returncode == 0, sandboxes.stderr
    assert "stamped" in sandboxes.stdout and "harness-plugin-example 1.0.0" in sandboxes.stdout
    assert "local" in sandboxes.stdout and "docker" in sandboxes.stdout
    agents = harness_in(venv, "agents", "list", cwd=tmp_path)
    assert agents.returncode == 0, agents.stderr
    assert "write-answer" in agents.stdout and "oracle" in agents.stdout


def test_a_trial_runs_with_the_plugins_backend_and_agent_by_name(
    venv: Path, tmp_path: Path
) -> None:
    task = tmp_path / "tasks" / "answer"
    (task / "tests").mkdir(parents=True)
    (task / "task.toml").write_text('[task]\nname = "answer"\n\n[agent]\ntimeout_sec = 30\n')
    (task / "instruction.md").write_text("Write the answer into answer.txt.\n")
    (task / "tests" / "test.sh").write_text(
        '#!/bin/bash\n[ "$(cat "$HARNESS_WORKSPACE/answer.txt")" = 7 ] && r=1 || r=0\n'
        'echo $r > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    result = harness_in(
        venv, "run", task, "--sandbox", "stamped", "--agent", "write-answer",
        "--set", "agent.kwargs.answer='7'", "--set", "sandbox.kwargs.stamp='from-plugin'",
        "--set", f"sandbox.uid={UID_BASE}", "--set", f"sandbox.gid={UID_BASE}",
        "-o", tmp_path / "runs", "--json", cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = Path(json.loads(result.stdout)["run_dir"])
    [record] = [json.loads(line) for line in (run_dir / "trials.jsonl").read_text().splitlines()]
    assert record["status"] == "completed" and record["reward"] == 1.0
    assert record["agent"] == {"name": "write-answer", "model": None, "answer": "7"}
    assert record["sandbox"]["backend"] == "stamped"
    assert record["sandbox"]["stamp"] == "from-plugin"
    assert record["sandbox"]["uid"] == UID_BASE  # the agent ran as a dropped per-trial uid
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob(f"harness-stamped-{run_dir.name}"))
