"""The image's config in every phase, as Harbor gives it: ENV and PATH, WORKDIR, the login
shell's dotfiles, ``git`` on the agent's workspace in the verifier; and an image ENV that
tries to set the harness's own variables (HOME, TMPDIR, the gateway's, HARNESS_*) or to
load its code into the harness's processes (LD_PRELOAD, LD_DEBUG_OUTPUT, PYTHONPATH).

One oracle trial on docker (runc): its agent and its verifier check the same things, each
writes what it saw, and the verifier's reward is 1 only if both saw everything right.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.docker import docker_client, require_image

pytestmark = pytest.mark.docker

DOCKERFILE = """\
FROM harness/base:bookworm
COPY git-dist /opt/git-dist
COPY git-dist/git.sh /usr/bin/git
COPY mytool /opt/tool/bin/mytool
COPY sitecustomize.py /opt/tool/py/sitecustomize.py
RUN chmod 755 /usr/bin/git /opt/tool/bin/mytool \\
 && echo 'export ROOT_BASHRC_READ=yes' >> /root/.bashrc \\
 && echo 'export SKEL_PROFILE_READ=yes' >> /etc/skel/.profile \\
 && ln -s /etc/shadow /root/.shadow-link && mkfifo /root/.a-fifo \\
 && mkdir -p /root/.cache && head -c 3000000 /dev/zero > /root/.cache/big \\
 && mkdir -p /srv/app && cd /srv/app && git init -q && echo hi > tracked.txt \\
 && git add tracked.txt && git -c user.name=t -c user.email=t@t commit -qm init
ENV FOO=x PATH=/opt/tool/bin:$PATH PYTHONPATH=/opt/tool/py LD_LIBRARY_PATH=/opt/tool/lib
ENV HOME=/img-home TMPDIR=/img-tmp OPENAI_API_KEY=image-key \\
    ANTHROPIC_BASE_URL=http://image.invalid HARNESS_WORKSPACE=/evil \\
    LD_PRELOAD=/opt/tool/missing.so LD_DEBUG=files LD_DEBUG_OUTPUT=/tmp/ld-debug
WORKDIR /srv/app
"""
MYTOOL = "#!/bin/sh\necho mytool-ran\n"
# Any Python that honours the image's PYTHONPATH imports it; the harness's never do (-I).
SITECUSTOMIZE = "raise SystemExit('the image sitecustomize ran')\n"
# What both phases check; each line is "name ok|BAD detail".
CHECKS = r"""
check() { if [ "$2" = "$3" ]; then echo "$1 ok"; else echo "$1 BAD got=[$2] want=[$3]"; fi; }
check foo "$FOO" x
check mytool "$(mytool 2>&1)" mytool-ran
check cwd "$(pwd)" /srv/app
check workspace "$HARNESS_WORKSPACE" /srv/app
check pythonpath "${PYTHONPATH#/opt/harness-tools/site:}" /opt/tool/py
check ld_library_path "$LD_LIBRARY_PATH" /opt/tool/lib
check ld_preload "${LD_PRELOAD-unset}" unset
check openai_key "${OPENAI_API_KEY-unset}" unset
check anthropic_url "${ANTHROPIC_BASE_URL-unset}" unset
check home_not_image "$([ "$HOME" != /img-home ] && echo yes)" yes
check tmpdir_in_home "$(case "$TMPDIR" in "$HOME"/*) echo yes;; esac)" yes
check git_status "$(git status --porcelain -- tracked.txt 2>&1 | head -3)" ""
check git_tracked "$(git ls-files 2>&1)" tracked.txt
# The image's LD_DEBUG reaches the phase's processes; the supervisor (pid 1, on the
# mounted runtime) never ran with it.
check ld_debug "$(ls /tmp/ld-debug.* 2>/dev/null | head -1 | cut -c1-13)" /tmp/ld-debug
check supervisor_loader "$(grep -l harness-python /tmp/ld-debug.* 2>/dev/null | head -1)" ""
"""
SOLVE = (
    "#!/bin/bash\n"
    "{\n" + CHECKS + "check login_profile \"$(bash -lc 'echo $SKEL_PROFILE_READ')\" yes\n"
    "} > /srv/app/agent-checks.txt 2>&1\n"
    "echo agent-change > /srv/app/agent.txt\n"
)
TEST = (
    "#!/bin/bash\n"
    "{\n" + CHECKS + "check login_bashrc \"$(bash -lc 'echo $ROOT_BASHRC_READ')\" yes\n"
    'check home_is_grader "$(case "$HOME" in */grader/home) echo yes;; esac)" yes\n'
    # The harness's sitecustomize (a script's own dir) goes in front of the image's.
    'check harness_site "$PYTHONPATH" /opt/harness-tools/site:/opt/tool/py\n'
    'check dotfile_seeded "$([ -f "$HOME/.bashrc" ] && echo yes)" yes\n'
    'check no_link "$([ -L "$HOME/.shadow-link" ] || echo yes)" yes\n'
    'check no_fifo "$([ -e "$HOME/.a-fifo" ] || echo yes)" yes\n'
    'check no_big "$([ -e "$HOME/.cache/big" ] || echo yes)" yes\n'
    'check agent_git_change "$(git status --porcelain agent.txt)" "?? agent.txt"\n'
    'check agent_exec "$("$HARNESS_AGENT_EXEC" -- sh -c \'echo "$FOO"\' | tail -1)" x\n'
    "} > /tmp/verifier-checks.txt 2>&1\n"
    "cat /tmp/verifier-checks.txt\n"
    "echo ---agent\n"
    "cat /srv/app/agent-checks.txt\n"
    "if grep -q BAD /tmp/verifier-checks.txt /srv/app/agent-checks.txt; then r=0; else r=1; fi\n"
    'echo "$r" > /logs/verifier/reward.txt\n'
)


def test_image_env_workdir_dotfiles_and_git_reach_both_phases_and_never_ours(
    e2e: Any, tmp_path: Path
) -> None:
    require_image(docker_client())
    git = shutil.which("git")
    assert git is not None, "the test image borrows this host's git"
    task = tmp_path / "set" / "image-config"
    for rel, text in {
        "task.toml": "[agent]\ntimeout_sec = 60\n[verifier]\ntimeout_sec = 60\n",
        "instruction.md": "Check the image's environment.\n",
        "environment/Dockerfile": DOCKERFILE,
        "environment/mytool": MYTOOL,
        "environment/sitecustomize.py": SITECUSTOMIZE,
        "solution/solve.sh": SOLVE,
        "tests/test.sh": TEST,
    }.items():
        (task / rel).parent.mkdir(parents=True, exist_ok=True)
        (task / rel).write_text(text)
    _bundle(Path(git), task / "environment" / "git-dist")
    out = tmp_path / "runs"
    result = e2e.run(
        "run",
        task,
        "--sandbox",
        "docker",
        "--agent",
        "oracle",
        "-o",
        out,
        "--display",
        "none",
        timeout=400,
    )
    run = e2e.read_run(e2e.only_run_dir(out))
    (record,) = run.records
    evidence = run.evidence(record)
    stdout = (evidence / "verifier" / "test-stdout.txt").read_text()
    verifier_lines, _, agent_lines = stdout.partition("---agent\n")
    assert "BAD" not in stdout, stdout
    # Every check ran in both phases (a check that never ran is no pass).
    for lines, extra in ((agent_lines, 1), (verifier_lines, 9)):
        assert lines.count(" ok\n") == CHECKS.count("\ncheck ") + extra, lines
    assert result.code == 0 and record["reward"] == 1.0, (result, stdout)
    image_env = record["sandbox"]["image_env"]
    assert {"FOO", "PATH", "PYTHONPATH", "LD_LIBRARY_PATH", "LD_DEBUG"} <= set(image_env["applied"])
    assert set(image_env["withheld"]) == {
        "HOME",
        "TMPDIR",
        "OPENAI_API_KEY",
        "ANTHROPIC_BASE_URL",
        "HARNESS_WORKSPACE",
        "LD_PRELOAD",
    }
    assert "image-key" not in str(record)


def _bundle(git: Path, dest: Path) -> None:
    """The host's git with its own loader and libraries: it runs in any glibc image."""
    dest.mkdir()
    found = subprocess.run(["ldd", str(git)], capture_output=True, text=True, check=True).stdout
    loader = None
    for line in found.splitlines():
        parts = line.split()
        path = parts[2] if len(parts) > 2 and parts[1] == "=>" else parts[0]
        if not path.startswith("/"):
            continue  # linux-vdso
        shutil.copyfile(path, dest / Path(path).name)
        if "ld-linux" in path:
            loader = Path(path).name
    assert loader is not None, found
    shutil.copyfile(git, dest / "git")
    where = "/opt/git-dist"
    (dest / "git.sh").write_text(
        f'#!/bin/sh\nexec {where}/{loader} --library-path {where} {where}/git "$@"\n'
    )
    for entry in dest.iterdir():
        entry.chmod(0o755)
