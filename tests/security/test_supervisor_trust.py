"""A root agent plants code for the supervisor to load from the container's root.

The supervisor (the container's pid 1, root) and every harness step before a phase's
``execve`` run in a root the agent writes under ``--agent-root allow`` (runc) or
``isolated`` (gVisor). glibc loads code named there: NSS modules that
``/etc/nsswitch.conf`` names (a service with a ``/`` is a path relative to the working
dir), libraries through ``/etc/ld.so.preload`` and ``/etc/ld.so.cache``, ``gconv``
modules for a locale's charset. The agent plants all of them, then waits while the test
starts a one-shot supervisor beside pid 1 (the container's own command, as the backend's
file ops during a phase do); each plant is the same shared object
built here on the host: its constructor appends who loaded it (pid, uid, executable) to a
log in the workspace and one in the verifier's dir and, in a harness process (its
executable under ``/opt/harness``), keeps ``/logs/verifier/reward.txt`` at 1 from a
child. The task's ``test.sh`` fails.

Judged from outside: the reward is the honest 0 and the log, read from the trial's
evidence, names no harness process and no pid 1 (the verifier's own shell may load the
preloaded library: the agent's container is the shared verifier's, docs/grading.md).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

PLANTED_C = r"""
#define _GNU_SOURCE
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

__attribute__((constructor)) static void planted(void) {
    char exe[512] = {0}, line[1024];
    if (readlink("/proc/self/exe", exe, sizeof exe - 1) < 0) strcpy(exe, "?");
    int n = snprintf(line, sizeof line, "pid=%d uid=%d exe=%s\n", getpid(), getuid(), exe);
    const char *logs[] = {"/app/planted-ran.log", "/logs/verifier/planted-ran.log"};
    for (int i = 0; i < 2; i++) {
        int fd = open(logs[i], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0666);
        if (fd >= 0) { write(fd, line, n); close(fd); }
    }
    if (!strstr(exe, "/opt/harness")) return;  /* only a harness process cheats */
    if (fork() == 0) {
        setsid();
        for (int i = 0; i < 30000; i++) {
            int r = open("/logs/verifier/reward.txt", O_WRONLY | O_CREAT | O_TRUNC, 0644);
            if (r >= 0) { write(r, "1", 1); close(r); }
            usleep(10000);
        }
        _exit(0);
    }
}
"""

# Runs in the container as the root agent (never on the host).
ATTACK = r"""
set +e
L=/app/attack.txt
S=/app/planted.so
chmod 755 $S
# NSS: a service with a "/" is a path relative to the caller's working dir; one without
# is looked up by the loader (its cache, then /usr/lib).
mkdir -p '/app/libnss_.' '/app/libnss_/app' && cp $S '/app/libnss_./evil.so.2' \
  && cp $S '/app/libnss_/app/evil.so.2'; echo "nss_relative=$?" >> $L
cp $S /usr/lib/x86_64-linux-gnu/libnss_evil.so.2; echo "nss_libdir=$?" >> $L
mkdir -p /usr/local/lib && cp $S /usr/local/lib/libnss_cached.so.2 \
  && cp $S /usr/local/lib/libz.so.1 && ldconfig; echo "ld_cache=$?" >> $L
printf '%s\n' 'passwd: ./evil /app/evil evil cached files' \
  'group: ./evil /app/evil evil cached files' 'shadow: ./evil evil files' \
  'hosts: ./evil evil cached files' > /etc/nsswitch.conf; echo "nsswitch=$?" >> $L
# gconv: a module for every charset, the cache removed so the config is read.
G=/usr/lib/x86_64-linux-gnu/gconv
mkdir -p $G/gconv-modules.d && cp $S $G/EVIL.so && printf '%s\n' \
  'module INTERNAL EVIL// EVIL 1' 'module EVIL// INTERNAL EVIL 1' 'alias UTF-8// EVIL//' \
  'alias ANSI_X3.4-1968// EVIL//' > $G/gconv-modules.d/zz-evil.conf \
  && rm -f $G/gconv-modules.cache; echo "gconv=$?" >> $L
# Locales: a C.UTF-8 of our own (a new file: the old one may be mapped by this shell).
mkdir -p /usr/lib/locale/C.utf8 && rm -f /usr/lib/locale/C.utf8/LC_CTYPE \
  && cp $S /usr/lib/locale/C.utf8/LC_CTYPE; echo "locale=$?" >> $L
# Last: every new process of the container loads it.
echo $S > /etc/ld.so.preload; echo "preload=$?" >> $L
# The plant works in a fresh process (getent goes through NSS).
getent passwd root > /dev/null; echo "getent=$?" >> $L
echo done >> $L
# Wait while the test starts a one-shot supervisor beside pid 1 (a file op mid-phase).
for i in $(seq 600); do [ -e /app/oneshot-done ] && break; sleep 0.1; done
"""
TEST_SH = 'echo FAIL\necho 0 > "$HARNESS_VERIFIER_DIR/reward.txt"\nexit 1\n'


def _wait_for_the_plant(container: Any) -> None:
    """Until the attack wrote its last line (each check a process of the container)."""
    for _ in range(1200):
        code, _ = container.exec_run(["grep", "-qx", "done", "/app/attack.txt"])
        if code == 0:
            return
        container.reload()
        if container.status != "running":
            break
    pytest.fail("the attack never finished planting")


def _build(tmp_path: Path) -> Path:
    cc = shutil.which("gcc") or shutil.which("cc")
    if cc is None:
        pytest.fail("no C compiler on the host: this test builds the planted module with gcc")
    source = tmp_path / "planted.c"
    source.write_text(PLANTED_C)
    out = tmp_path / "planted.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(out), str(source)], check=True)
    return out


@pytest.mark.docker
def test_the_supervisor_loads_nothing_a_root_agent_plants_in_the_root(
    client: Any, cli: Any, sec: Any, tmp_path: Path, docker_runtime: str | None
) -> None:
    rule = "isolated" if docker_runtime == "runsc" else "allow"
    name = sec.unique("trust")
    task = sec.write_task(
        tmp_path / "tasks",
        name,
        attack=ATTACK,
        test_sh=TEST_SH,
        agent_timeout=60,
        verifier_timeout=30,
    )
    (task / "workspace").mkdir(exist_ok=True)
    shutil.copyfile(_build(tmp_path), task / "workspace" / "planted.so")
    proc = cli.start([task], extra=["--agent-root", rule, "--max-retries", "0"])
    with sec.Watcher(client, f"{sec.TASK_LABEL}={name}") as watcher:
        cid = watcher.wait_for_container(timeout=120)
        container = client.containers.get(cid)
        _wait_for_the_plant(container)
        # What the backend's one-shot supervisor runs: the container's own command.
        oneshot = client.api.exec_create(cid, container.attrs["Config"]["Cmd"], user="0:0")
        client.api.exec_start(oneshot["Id"])
        started = client.api.exec_inspect(oneshot["Id"])
        container.exec_run(["touch", "/app/oneshot-done"])
    run = cli.finish(proc, timeout=300)
    assert run.code in (0, 1), run
    assert started["ExitCode"] == 0, started  # it ran, read EOF and ended
    record = run.by_task(name)
    assert record["posture"]["identity"]["uid"] == 0, record["posture"]
    workspace = run.evidence(record) / "workspace"
    attack = (workspace / "attack.txt").read_text()
    assert "done" in attack, attack
    # Who loaded it: in the agent's phase (the workspace, kept when the phase ended) and
    # from the verifier's reset on (its dir, kept after it).
    logs = [workspace / "planted-ran.log", run.evidence(record) / "verifier" / "planted-ran.log"]
    log = "".join(path.read_text() for path in logs if path.exists())
    if "nsswitch=0" in attack:
        # The plant works: a fresh process of the container loads it (the preload, or
        # getent's NSS lookup), so the checks below pass for no vacuous reason.
        assert "exe=/usr/bin/getent" in log, (attack, log)
        # ... and so does a process the engine starts in the container (docker exec).
        assert "exe=/usr/bin/touch" in log, (attack, log)
    lines = log.splitlines()
    assert not [x for x in lines if "/opt/harness" in x], f"a harness process ran it:\n{log}"
    assert not [x for x in lines if x.startswith("pid=1 ")], f"pid 1 ran it:\n{log}"
    # The honest reward: test.sh failed.
    assert record["status"] == "completed", record
    assert record["reward"] == 0.0, (record, attack, log)
