"""The verifier's and judges' environment cannot be steered from the workspace or /tmp.

Each test is a hostile agent run through the real CLI on local, docker and gVisor, judged
from outside: the trial's record (its reward, its episode's verdict) and the run dir's
copy of the verifier dir. The tests' own scripts play a naive task author (fixed scratch
names in /tmp, ``python3 -m pytest`` run from the workspace): they are the verifier's
worst case, not the harness's.

- a symlink the agent planted in ``/tmp``, ``/var/tmp`` or ``/dev/shm`` never redirects a
  verifier's scratch write into ``reward.json`` (each step of a multi-step task gets
  fresh, empty, verifier-owned dirs; the next step's agent finds its own files again);
- ``pytest.py``, ``sitecustomize.py``, ``usercustomize.py`` and ``conftest.py`` in the
  workspace never run in ``python3 -m pytest`` started there (``PYTHONSAFEPATH``);
- a shared judge's verdict is its own, whatever ``usercustomize.py``, ``.pth`` files or
  shadowing modules the solver left in its home and workspace;
- a repository dir name with a newline and a ``[core]`` section never becomes config of
  the verifier's git (its ``safe.directory`` entries name each repository).
"""

from __future__ import annotations

import json
import shutil
import textwrap
from pathlib import Path
from typing import Any

import pytest
from support.docker import prerequisite_missing

#: Where each backend's verifier dir is (the agent plants links to both).
VERIFIER_DIRS = ("/logs/verifier", "/trial/verifier")
SCRATCH = ("/tmp", "/var/tmp", "/dev/shm")


def _write(path: Path, text: str, mode: int = 0o644) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(mode)


# ============================================================== /tmp symlinks, two steps

#: Step one's agent: links named like the verifier's scratch files, and files of its own.
PLANT = "\n".join(
    [
        "set -u",
        *(
            f"ln -sfn {vdir}/reward.json {d}/result{i}.json; "
            f"ln -sfn {vdir}/reward.txt {d}/score{i}.txt"
            for d in SCRATCH
            for i, vdir in enumerate(VERIFIER_DIRS)
        ),
        *(f'echo "agent-kept-{n}" > {d}/agent-note' for n, d in enumerate(SCRATCH)),
        'echo planted > "$HARNESS_WORKSPACE/planted.txt"',
    ]
)

#: Step two's agent: what it finds in its scratch dirs (its own files, none of the verifier's).
LOOK = textwrap.dedent(
    """\
    python3 - <<'PY'
    import json, os
    seen = {}
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        entries = {}
        for name in sorted(os.listdir(d)):
            path = os.path.join(d, name)
            if os.path.islink(path):
                entries[name] = "-> " + os.readlink(path)
            elif os.path.isfile(path):
                entries[name] = open(path).read().strip()
            else:
                entries[name] = "?"
        seen[d] = entries
    ws = os.environ["HARNESS_WORKSPACE"]
    with open(os.path.join(ws, "seen-by-step-two.json"), "w") as fh:
        json.dump(seen, fh)
    PY
    """
)

#: A naive test.sh: the reward first, then scratch files under fixed names in /tmp.
NAIVE_TEST = textwrap.dedent(
    """\
    VD="$HARNESS_VERIFIER_DIR"
    python3 - <<'PY'
    import json, os
    report = {}
    for d in ("/tmp", "/var/tmp", "/dev/shm"):
        st = os.stat(d)
        report[d] = {"entries": sorted(os.listdir(d)), "mode": oct(st.st_mode & 0o7777),
                     "uid": st.st_uid, "mine": st.st_uid == os.getuid()}
    print("SCRATCH " + json.dumps(report))
    PY
    echo 0 > "$VD/reward.txt"
    for d in /tmp /var/tmp /dev/shm; do
      for i in 0 1; do
        echo '{"reward": 1}' > "$d/result$i.json" 2>/dev/null
        echo 1 > "$d/score$i.txt" 2>/dev/null
      done
      echo verifier-scratch > "$d/verifier-note"
    done
    ls -la "$VD"
    """
)


def _two_step_task(root: Path, name: str) -> Path:
    task = root / name
    _write(
        task / "task.toml",
        f'[task]\nname = "{name}"\n\n[agent]\ntimeout_sec = 30\n\n[verifier]\ntimeout_sec = 30\n'
        '\n[environment]\ncpus = 1\nmemory_mb = 512\n\n[[steps]]\nname = "plant"\n\n'
        '[[steps]]\nname = "look"\n',
    )
    _write(task / "instruction.md", "Two steps.\n")
    for step, script in (("plant", PLANT), ("look", LOOK)):
        _write(task / "steps" / step / "instruction.md", "#!/bin/bash\n" + script + "\n")
        _write(task / "steps" / step / "tests" / "test.sh", "#!/bin/bash\n" + NAIVE_TEST, 0o755)
    return task


def _step_outputs(run: Any, record: dict[str, Any]) -> list[str]:
    """Every step's verifier stdout, in the run dir."""
    found = sorted(run.evidence(record).rglob("test-stdout.txt"))
    assert len(found) == 2, f"expected two verifier outputs, got {found}\n{run}"
    return [path.read_text() for path in found]


def test_a_planted_tmp_symlink_never_redirects_a_verifiers_scratch_write(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack: links in /tmp, /var/tmp, /dev/shm to reward.json/reward.txt, before each step.

    The naive test.sh writes reward 0 and then ``{"reward": 1}`` to ``/tmp/result0.json``
    and friends. With the agent's scratch dirs shared (and ``fs.protected_symlinks`` off,
    as on this host, or gVisor), each such write lands in the reward file. From outside:
    every step's reward is 0 and no ``reward.json`` reached the run dir; each verifier saw
    its scratch dirs empty, its own and 0755 (1775 in docker: the image's ``_apt`` group may
    write, never the agent); step two's agent found its own files again
    and nothing the verifier wrote.
    """
    name = sec.unique("tmp-link")
    task = _two_step_task(tmp_path / "tasks", name)
    run = any_cli.run([task], timeout=240)
    assert run.code == 0, run
    record = run.by_task(name)
    assert record["status"] == "completed", record
    assert record["reward"] == 0.0, record
    for step in record.get("steps") or []:
        assert step.get("reward") == 0.0, record
    assert not list(run.evidence(record).rglob("reward.json")), list(
        run.evidence(record).rglob("*")
    )
    private = "0o755" if backend == "local" else "0o1775"
    for text in _step_outputs(run, record):
        report = json.loads(text.split("SCRATCH ", 1)[1].splitlines()[0])
        for d in SCRATCH:
            assert report[d]["entries"] == [], report
            assert report[d]["mode"] == private and report[d]["mine"], report
    seen = json.loads(next(run.evidence(record).rglob("seen-by-step-two.json")).read_text())
    for n, d in enumerate(SCRATCH):
        assert seen[d]["agent-note"] == f"agent-kept-{n}", seen
        assert seen[d]["result0.json"] == "-> /logs/verifier/reward.json", seen
        assert "verifier-note" not in seen[d], seen


# ============================================================== the workspace's modules

#: A stand-in for an installed pytest (neither image has one): runs test_* functions.
STAND_IN_PYTEST = textwrap.dedent(
    """\
    import importlib.util, sys
    failed = 0
    for path in sys.argv[1:]:
        spec = importlib.util.spec_from_file_location("under_test", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        for name in sorted(dir(module)):
            if name.startswith("test_"):
                try:
                    getattr(module, name)()
                    print("PASSED", name)
                except Exception as exc:
                    failed += 1
                    print("FAILED", name, repr(exc))
    print("REAL-PYTEST-RAN")
    sys.exit(1 if failed else 0)
    """
)

TEST_ANSWER = textwrap.dedent(
    """\
    import os

    def test_answer():
        with open(os.path.join(os.environ["HARNESS_WORKSPACE"], "answer.txt")) as fh:
            assert fh.read().strip() == "42"
    """
)

#: Harbor's habit: cd to the workspace, ``python3 -m pytest``, the exit status decides.
PYTEST_TEST_SH = textwrap.dedent(
    """\
    HERE=$(cd "$(dirname "$0")" && pwd)
    VD="$HARNESS_VERIFIER_DIR"
    cd "$HARNESS_WORKSPACE"
    export PYTHONPATH="$HERE/lib"
    if python3 -m pytest "$HERE/test_answer.py"; then echo 1 > "$VD/reward.txt"
    else echo 0 > "$VD/reward.txt"; fi
    """
)


def _forger(module: str, verdict: int) -> str:
    """Python that, when imported in the verifier, leaves a mark and forces ``verdict``."""
    return textwrap.dedent(
        f"""\
        import os, sys
        vd = os.environ.get("HARNESS_VERIFIER_DIR", "")
        try:
            open(os.path.join(vd, "forged-by-{module}"), "w").write("imported")
            open(os.path.join(vd, "reward.txt"), "w").write("{verdict}")
        except OSError:
            pass
        os._exit({0 if verdict else 1})
        """
    )


def _module_task(root: Path, name: str, *, answer: str, forged_verdict: int) -> Path:
    """The agent writes ``answer`` and forgers that force ``forged_verdict``."""
    files = {
        mod: _forger(mod, forged_verdict)
        for mod in ("pytest", "sitecustomize", "usercustomize", "conftest")
    }
    lines = ["set -u", 'cd "$HARNESS_WORKSPACE"', f"echo {answer} > answer.txt"]
    for mod, text in files.items():
        lines.append(f"cat > {mod}.py <<'PY'\n{text}PY")
    task = root / name
    _write(
        task / "task.toml",
        f'[task]\nname = "{name}"\n\n[agent]\ntimeout_sec = 20\n\n[verifier]\ntimeout_sec = 30\n'
        "\n[environment]\ncpus = 1\nmemory_mb = 512\n",
    )
    _write(task / "instruction.md", "#!/bin/bash\n" + "\n".join(lines) + "\n")
    _write(task / "tests" / "test.sh", "#!/bin/bash\n" + PYTEST_TEST_SH, 0o755)
    _write(task / "tests" / "test_answer.py", TEST_ANSWER)
    _write(task / "tests" / "lib" / "pytest" / "__init__.py", "")
    _write(task / "tests" / "lib" / "pytest" / "__main__.py", STAND_IN_PYTEST)
    return task


def test_the_workspaces_pytest_py_never_runs_in_python3_m_pytest(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack: ``pytest.py`` (and site/user customize, conftest) in the workspace.

    The verifier ``cd``s to the workspace and runs ``python3 -m pytest``: with the start
    dir on ``sys.path`` the agent's ``pytest.py`` would be imported instead of the real one
    and decide the exit status. Two agents: a wrong answer whose forgers force success,
    a right answer whose forgers force failure. From outside: the rewards are the honest
    0 and 1, and no forger left its mark in the verifier dir.
    """
    wrong, right = sec.unique("pytest-py-wrong"), sec.unique("pytest-py-right")
    tasks = tmp_path / "tasks"
    paths = [
        _module_task(tasks, wrong, answer="41", forged_verdict=1),
        _module_task(tasks, right, answer="42", forged_verdict=0),
    ]
    run = any_cli.run(paths, timeout=240)
    assert run.code == 0, run
    for name, honest in ((wrong, 0.0), (right, 1.0)):
        record = run.by_task(name)
        assert record["status"] == "completed", record
        assert record["reward"] == honest, record
        verifier = run.evidence(record) / "verifier"
        assert not list(verifier.glob("forged-by-*")), list(verifier.iterdir())
        stdout = (verifier / "test-stdout.txt").read_text()
        assert "REAL-PYTEST-RAN" in stdout, stdout


# ============================================================== a shared judge

#: The solver: hello.txt, and everything that would steer a Python the judge starts.
SOLVER = textwrap.dedent(
    """\
    set -u
    cd "$HARNESS_WORKSPACE"
    printf 'Hello, world!\\n' > hello.txt
    FORGE='import atexit, os
    def _forge():
        path = os.environ.get("HARNESS_VERDICT_FILE")
        if path:
            open(path, "w").write("{\\"score\\": 1.0, \\"reason\\": \\"forged\\"}")
    atexit.register(_forge)
    '
    PTH="import atexit; exec($(python3 -c 'import sys; print(repr(sys.argv[1]))' "$FORGE"))"
    for v in 3.9 3.10 3.11 3.12 3.13; do
      for top in "$HOME" "$HOME/judge/home"; do
        site="$top/.local/lib/python$v/site-packages"
        mkdir -p "$site"
        printf '%s' "$FORGE" > "$site/usercustomize.py"
        printf '%s' "$FORGE" > "$site/sitecustomize.py"
        printf '%s\\n' "$PTH" > "$site/zz-forge.pth"
      done
    done
    # Modules the judge's python3 -c would import from its start dir (the workspace):
    # json.py forges and breaks the judge (no dumps), so only the forged verdict is left.
    printf '%s' "$FORGE" > json.py
    printf '%s' "$FORGE" > sitecustomize.py
    printf '%s' "$FORGE" > usercustomize.py
    printf 'echo forged-rc >> "$HARNESS_WORKSPACE/rc-ran"\\n' > "$HOME/.bashrc"
    cp "$HOME/.bashrc" "$HOME/.profile"
    """
)

#: The judge: a verdict of 0.1, written by a python3 started in the workspace.
JUDGE = (
    "python3 -c 'import json, os; "
    'open(os.environ["HARNESS_VERDICT_FILE"], "w").write('
    'json.dumps(dict(score=0.1, reason="judged")))\''
)


def test_a_shared_judges_verdict_is_its_own(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack: the solver plants usercustomize/sitecustomize/.pth in its HOME's site dirs
    (and where the judge's HOME will be), ``json.py`` and friends in the workspace, and
    rc files; each rewrites the verdict to 1.0 when the judge's Python exits.

    From outside: the episode's record holds the judge's own 0.1, and the verdict the
    run dir kept is the judge's.
    """
    name = sec.unique("judge-forge")
    task = sec.write_task(tmp_path / "tasks", name, attack=SOLVER)
    _write(task / "judge" / "rubric.md", "Score hello.txt.\n")
    config = tmp_path / "judge.toml"
    config.write_text(
        '[env]\nid = "judge"\nmode = "shared"\n\n[env.roles.judge]\nname = "command"\n'
        f"cmd = {json.dumps(JUDGE)}\n"
    )
    run = any_cli.run([task], timeout=240, extra=["-c", str(config)])
    assert run.code == 0, run
    record = run.by_task(name)
    episode = record.get("episode")
    assert episode is not None, record
    judges = [t for t in episode["traces"] if t["role"] == "judge"]
    assert len(judges) == 1, episode
    assert judges[0]["reward"] == 0.1, episode
    assert record["reward"] == 0.1, record
    assert run.run_dir is not None
    verdicts = list(run.run_dir.rglob("verdict.json"))
    assert len(verdicts) == 1, verdicts
    verdict = json.loads(verdicts[0].read_text())
    assert verdict == {"score": 0.1, "reason": "judged"}, verdict
    assert not list(run.run_dir.rglob("rc-ran")), "the solver's rc file ran in the judge"


# ============================================================== a separate verifier


@pytest.mark.docker
def test_a_separate_verifier_gets_scratch_dirs_of_its_own(
    cli: Any, sec: Any, tmp_path: Path
) -> None:
    """A separate verifier (a container built from ``tests/``) gets the same fresh dirs.

    The agent plants its links and files as before; its container is not the verifier's,
    and the verifier's own scratch dirs are still empty, its own and 1775 (the image's _apt
    group may write, never the agent; the image's
    1777 ``/tmp`` is not what it writes in). From outside: the reward the naive test.sh
    wrote, 0, and the report of what it saw.
    """
    name = sec.unique("separate-tmp")
    task = tmp_path / "tasks" / name
    _write(
        task / "task.toml",
        f'artifacts = ["/app/answer.txt"]\n\n[task]\nname = "{name}"\n\n'
        "[agent]\ntimeout_sec = 30\n\n"
        '[verifier]\ntimeout_sec = 30\nenvironment_mode = "separate"\n\n'
        "[environment]\ncpus = 1\nmemory_mb = 512\n",
    )
    _write(task / "instruction.md", "#!/bin/bash\n" + PLANT + "\necho 42 > /app/answer.txt\n")
    _write(task / "environment" / "Dockerfile", f"FROM {sec.BASE_IMAGE}\nWORKDIR /app\n")
    _write(
        task / "tests" / "Dockerfile",
        f"FROM {sec.BASE_IMAGE}\nWORKDIR /app\nCOPY test.sh /tests/test.sh\n"
        "RUN chmod 755 /tests/test.sh\n",
    )
    _write(task / "tests" / "test.sh", "#!/bin/bash\n" + NAIVE_TEST, 0o755)
    run = cli.run([task], timeout=300)
    assert run.code == 0, run
    record = run.by_task(name)
    assert record["status"] == "completed", record
    assert record["reward"] == 0.0, record
    stdout = (run.evidence(record) / "verifier" / "test-stdout.txt").read_text()
    report = json.loads(stdout.split("SCRATCH ", 1)[1].splitlines()[0])
    for d in SCRATCH:
        assert report[d]["entries"] == [], report
        assert report[d]["mode"] == "0o1775" and report[d]["mine"], report


# ============================================================== git config from dir names

#: The agent: a real repository, and one whose dir name would be config if written raw.
GIT_PLANT = textwrap.dedent(
    """\
    set -e
    cd "$HARNESS_WORKSPACE"
    mkdir -p project/repo && git -C project/repo init -q
    evil="$(printf 'x\\n[core]\\n\\tfsmonitor = touch fsmonitor-ran')"
    mkdir -p "$evil" && git -C "$evil" init -q
    echo 42 > answer.txt
    """
)

#: The verifier: git in the agent's repository (fsmonitor would run there), its config.
GIT_TEST = textwrap.dedent(
    """\
    cd "$HARNESS_WORKSPACE/project/repo"
    git status --porcelain > /dev/null 2>&1; git status --porcelain 2>&1 | head -3
    echo "CONFIG"; git config --global --list 2>&1 | grep -v '^safe.directory=' || true
    if [ -e fsmonitor-ran ]; then echo FSMONITOR-RAN; fi
    if [ "$(cat "$HARNESS_WORKSPACE/answer.txt")" = 42 ]; then r=1; else r=0; fi
    echo "$r" > "$HARNESS_VERIFIER_DIR/reward.txt"
    """
)


def test_a_repository_dir_name_never_becomes_the_verifiers_git_config(
    backend: str, any_cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack: the agent names a repository ``x\\n[core]\\n\\tfsmonitor = touch ...``.

    The verifier's ``.gitconfig`` lists every repository under the workspace; written
    raw, that name would set ``core.fsmonitor``, a command git runs as the verifier in any
    repository. From outside: the honest reward, no ``fsmonitor-ran`` file in the
    workspace's evidence, and no ``core.fsmonitor`` in the config the verifier's git read.
    """
    git = shutil.which("git")
    if git is None:
        prerequisite_missing("git on the host (copied into the task's image)")
    name = sec.unique("git-name")
    dockerfile = f"FROM {sec.BASE_IMAGE}\nCOPY git /usr/local/bin/git\nWORKDIR /app\n"
    task = sec.write_task(
        tmp_path / "tasks", name, attack=GIT_PLANT, test_sh=GIT_TEST, dockerfile=dockerfile
    )
    shutil.copy2(git, task / "environment" / "git")
    run = any_cli.run([task], timeout=240)
    assert run.code == 0, run
    record = run.by_task(name)
    assert record["status"] == "completed" and record["reward"] == 1.0, record
    stdout = (run.evidence(record) / "verifier" / "test-stdout.txt").read_text()
    assert "CONFIG" in stdout, stdout
    assert "fsmonitor" not in stdout.split("CONFIG", 1)[1].lower(), stdout
    assert "FSMONITOR-RAN" not in stdout, stdout
    assert not list(run.evidence(record).rglob("fsmonitor-ran"))
