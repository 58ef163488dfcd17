"""A task image cannot run its code in Terminus-2's interpreter through Debian's site hooks.

Debian's ``python3.13`` package links ``/usr/lib/python3.13/sitecustomize.py`` to
``/etc/python3.13/sitecustomize.py``; kept as a link in the agent's cache entry, it would
resolve inside the sandbox to the *image's* file, so a task image that ships one would run
its code in the agent's own interpreter (seeing its prompts and its token, able to change
what it does and what it logs). The runtime keeps no link out of its entry.

The attack: the task's image plants ``/etc/python3.13/sitecustomize.py``, which writes a
marker into the workspace (the agent's start dir). Judged from outside: the marker is not
in the kept workspace, the reward is the honest one (1: the agent did write
``hello.txt``), the trial recorded on attempt 1, and the agent's entry has no link that
leaves it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client, require_image

pytestmark = pytest.mark.docker

REPO = Path(__file__).resolve().parents[2]

AGENT = "terminus-2"

HOOK = "import os\nopen(os.path.join(os.getcwd(), 'IMAGE-HOOK-RAN'), 'w').write('ran')\n"
DOCKERFILE = """FROM harness/base:bookworm
COPY sitecustomize.py /etc/python3.13/sitecustomize.py
"""


def _answer(keystrokes: list[str], *, complete: bool = False) -> dict[str, Any]:
    """A faux response in Terminus-2's JSON format."""
    body = {
        "analysis": "a",
        "plan": "p",
        "commands": [{"keystrokes": k, "duration": 0.5} for k in keystrokes],
        "task_complete": complete,
    }
    return {"text": json.dumps(body)}


def test_the_images_sitecustomize_never_runs_in_the_agents_python(tmp_path: Path) -> None:
    script = {
        "responses": [
            _answer(["printf 'Hello, world!\\n' > hello.txt\n"]),
            _answer([], complete=True),
            _answer([], complete=True),
        ]
    }
    require_image(docker_client())
    tasks = tmp_path / "tasks"
    shutil.copytree(REPO / "examples" / "tasks" / "hello-file", tasks / "hello-file")
    toml = tasks / "hello-file" / "task.toml"
    text = toml.read_text()
    assert "[agent]\ntimeout_sec = 60" in text
    toml.write_text(text.replace("[agent]\ntimeout_sec = 60", "[agent]\ntimeout_sec = 900"))
    (tasks / "hello-file" / "environment" / "Dockerfile").write_text(DOCKERFILE)
    (tasks / "hello-file" / "environment" / "sitecustomize.py").write_text(HOOK)
    (tasks / "script.json").write_text(json.dumps(script))
    (tasks / "models.toml").write_text(
        '[models."faux/hooks"]\nscript = "script.json"\napi = "openai-chat"\n'
    )
    out = tmp_path / "runs"
    argv = [sys.executable, "-m", "harness", "run", str(tasks), "--agent", AGENT]
    argv += ["--model", "faux/hooks", "--sandbox", "docker", "-o", str(out)]
    env = {**os.environ, "HARNESS_PROVIDER": "", "HARNESS_MODEL": "", "NO_COLOR": "1"}
    done = subprocess.run(  # the harness's own CLI
        argv, cwd=REPO, env=env, capture_output=True, text=True, timeout=900, check=False
    )
    assert done.returncode in (0, 1), done.stderr
    [run_dir] = [p for p in out.iterdir() if p.is_dir()]
    lines = (run_dir / "trials.jsonl").read_text().splitlines()
    [record] = [json.loads(line) for line in lines]
    assert record["status"] == "completed", record["errors"]
    assert record["attempt"] == 1
    [evidence] = (run_dir / "trials").iterdir()
    assert (evidence / "workspace" / "hello.txt").read_text() == "Hello, world!\n"
    assert not (evidence / "workspace" / "IMAGE-HOOK-RAN").exists()
    assert record["reward"] == 1
    entry = Path(record["agent"]["install"]["path"])
    escaping = [
        p for p in entry.rglob("*")
        if p.is_symlink() and not p.resolve().is_relative_to(entry.resolve())
    ]  # fmt: skip
    assert escaping == [], [(str(p), os.readlink(p)) for p in escaping]
