"""Attacks on the writable image root (sandbox/docker/rootlayer.py, sandbox/root_scan.py).

A docker trial's image root is writable, under runc and gVisor alike: its overlay layer
lives on the trial's own capped filesystem. The attacks plant from inside the trial and
judge from outside: the host's mounts and loop devices, the engine's layer dir, the host
file's mount flags, the harness's own RSS and fds. Where the layer cannot be moved (here:
no host storage) the root is still writable, capped softly, and the run says so once.
"""

from __future__ import annotations

import base64
import io
import logging
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from sandbox.backend import PhaseRequest, Resources, SandboxSpec
from sandbox.docker.backend import DockerSandbox
from sandbox.docker.images import ImageResolver
from sandbox.docker.runtime import DockerRuntime
from sandbox.environment import FIXED_PATH
from sandbox.root_changes import MAX_ROOT_CHANGES

pytestmark = pytest.mark.docker

#: A setuid-root binary the image ships (``id`` prints ``euid=0`` when it takes effect),
#: and a dir the unprivileged agent may write in the image root.
DOCKERFILE = """\
FROM harness/base:bookworm
RUN cp /usr/bin/id /usr/local/bin/suid-id && chmod 4755 /usr/local/bin/suid-id \\
 && mkdir -m 1777 /srv/drop
"""


@pytest.fixture(scope="module")
def image(client: Any) -> Iterator[str]:
    """The test image (built offline from the base image), removed afterwards."""
    tag = f"harness-test/writable-root:{os.getpid()}"
    context = io.BytesIO()
    with tarfile.open(fileobj=context, mode="w") as tar:
        data = DOCKERFILE.encode()
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    context.seek(0)
    client.images.build(fileobj=context, custom_context=True, tag=tag, rm=True, pull=False)
    yield tag
    client.images.remove(tag, force=True)


@pytest.fixture
def runtime(client: Any, docker_runtime: str | None, sec: Any) -> Iterator[DockerRuntime]:
    made = DockerRuntime(
        client,
        ImageResolver(client),
        runtime=docker_runtime,
        run_label=sec.unique("wroot"),
        host_storage=True,
    )
    yield made
    made.close()


def _sandbox(runtime: DockerRuntime, image: str, storage_mb: int) -> DockerSandbox:
    spec = SandboxSpec(
        trial_id=f"wroot-{os.urandom(3).hex()}",
        image=image,
        resources=Resources(storage_mb=storage_mb, memory_mb=512),
    )
    sandbox = DockerSandbox(spec, runtime)
    try:
        sandbox.start()
    except BaseException:
        sandbox.stop()
        raise
    return sandbox


def _phase(sandbox: DockerSandbox, role: str, script: str, timeout: float = 120) -> str:
    result = sandbox.run_phase(
        PhaseRequest(
            role=role,  # type: ignore[arg-type]
            argv=["bash", "-c", script],
            env={"PATH": FIXED_PATH},
            timeout_sec=timeout,
        )
    )
    assert result.error is None, result
    data, _event = sandbox.read_file(f"{sandbox.paths.logs}/{role}.stdout", max_bytes=1 << 20)
    return (data or b"").decode(errors="replace")


def _mounted(path: Path) -> bool:
    with open("/proc/self/mountinfo", encoding="utf-8", errors="replace") as fh:
        return any(line.split()[4] == str(path) for line in fh)


def _loops_of(image: Path) -> str:
    found = subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True)
    return found.stdout.strip()


def _assert_gone(sandbox: DockerSandbox, runtime: DockerRuntime) -> None:
    """After stop and the runtime's drain: no mount, loop device, layer or trial dir left."""
    layer = sandbox._rootlayer
    assert layer is not None
    root = layer.copy.parent.parent  # <trial root>/fs/root-layer
    image = root / "storage.img"
    sandbox.stop()
    assert runtime.storage_pool.close() == []
    assert not _mounted(layer.paths.layer), "the root layer's bind was left mounted"
    assert not layer.paths.layer.exists(), "the engine's layer dir was left behind"
    assert not _mounted(root / "fs")
    assert _loops_of(image) == ""
    assert not root.exists(), f"the trial root {root} was left behind"


def _engine_side_bytes(layer: Path) -> int:
    """Bytes in the engine's own layer dir under the bind (a non-recursive bind of its parent)."""
    view = Path(f"/tmp/harness-layer-view-{os.getpid()}")
    view.mkdir(exist_ok=True)
    # Private at once: the engine's later mounts under its data root never reach the view.
    subprocess.run(["mount", "--bind", "--make-private", str(layer.parent), str(view)], check=True)
    try:
        total = 0
        for dirpath, _dirs, files in os.walk(view / layer.name / "diff"):
            total += sum(os.lstat(os.path.join(dirpath, f)).st_size for f in files)
        return total
    finally:
        subprocess.run(["umount", "-l", str(view)], check=True)
        view.rmdir()


def _free_mb(path: str) -> int:
    return shutil.disk_usage(path).free >> 20


@pytest.mark.serial  # the host's free space is measured: no other test may write meanwhile
def test_filling_the_root_stops_at_the_cap_and_setuid_never_yields_root(
    client: Any, runtime: DockerRuntime, docker_runtime: str | None, image: str
) -> None:
    """Attacks root-fill and setuid-planting, from the unprivileged agent.

    The fill ends in ENOSPC on the trial's filesystem, the engine's disk keeps its free
    space, and another trial's root still takes writes. The image's setuid-root ``id``
    and one the agent makes never run with euid 0 (no-new-privileges), and the planted
    one is, on the host, on a ``nosuid,nodev`` mount.
    """
    data_root = str(client.info().get("DockerRootDir") or "/var/lib/docker")
    sandbox = _sandbox(runtime, image, storage_mb=1024)
    other = _sandbox(runtime, image, storage_mb=256)
    try:
        free_before = _free_mb(data_root)
        out = _phase(
            sandbox,
            "agent",
            "/usr/local/bin/suid-id; cp /usr/bin/id /srv/drop/my-id; chmod 4755 /srv/drop/my-id;"
            " /srv/drop/my-id; dd if=/dev/zero of=/srv/drop/fill bs=1M count=3000 2>&1;"
            " echo dd=$?",
        )
        assert "euid=0" not in out and "uid=65532" in out, out
        assert "No space left on device" in out and "dd=1" in out, out
        layer = sandbox._rootlayer
        assert layer is not None
        fill = layer.upper / "srv" / "drop" / "fill"
        planted = layer.upper / "srv" / "drop" / "my-id"
        # From outside: the fill is on the trial's filesystem, of about its cap.
        assert os.stat(fill).st_dev == os.stat(layer.copy.parent).st_dev
        size_mb = fill.stat().st_size >> 20
        assert 900 <= size_mb <= 1024 + 256, size_mb
        # The engine's own layer dir (seen without the bind over it) holds none of it; the
        # host's free space went down by the trial's image at most (cap and reserve).
        assert _engine_side_bytes(layer.paths.layer) < 1 << 20
        assert _free_mb(data_root) > free_before - (1024 + 256 + 64)
        # The planted setuid file: setuid bits kept, but on a nosuid,nodev mount.
        assert planted.stat().st_mode & 0o4000
        flags = os.statvfs(planted).f_flag
        assert flags & os.ST_NOSUID and flags & os.ST_NODEV
        assert _mounted(layer.paths.layer)
        # Another trial's root is untouched and still takes writes.
        other_out = _phase(
            other, "verifier", "ls /srv/drop; dd if=/dev/zero of=/x bs=1M count=20 2>&1; echo ok=$?"
        )
        assert "fill" not in other_out and "ok=0" in other_out, other_out
        # The trial goes on honestly: the verifier runs and its reward lands.
        _phase(sandbox, "verifier", "echo 0 > /logs/verifier/reward.txt; echo done")
        reward, _ = sandbox.read_file("/logs/verifier/reward.txt", max_bytes=64)
        assert reward == b"0\n"
        listing = sandbox.root_changes()
        assert listing is not None
        changes = {c.path: c for c in listing.changes}
        assert changes["/srv/drop/my-id"].mode == 0o4755
        assert changes["/srv/drop/fill"].kind == "added"
    finally:
        other.stop()
    _assert_gone(sandbox, runtime)


@pytest.mark.parametrize("docker_runtime", ["runc"], indirect=True)
def test_hostile_names_counts_and_depth_in_the_root_stay_bounded(
    runtime: DockerRuntime, image: str
) -> None:
    """Attack hostile-root-listing: 10^5 files, a 2000-deep tree, non-UTF-8 and newline names.

    ``root_changes()`` stays bounded (MAX_ROOT_CHANGES, truncated, every change counted),
    keeps names lossless, follows no link, and costs the harness no fds and little memory.
    """
    sandbox = _sandbox(runtime, image, storage_mb=2048)
    plant = (
        "import os\n"
        "os.chdir('/srv/drop')\n"
        "open(b'\\x01caf\\xe9', 'w').close()\n"
        "open(b'\\x02line\\nbreak', 'w').close()\n"
        "os.symlink('/etc', '\\x03to-etc')\n"
        "os.mkdir('\\x04deep'); os.chdir('\\x04deep')\n"
        "for _ in range(2000):\n"
        "    os.mkdir('d'); os.chdir('d')\n"
        "os.chdir('/srv/drop'); os.mkdir('many')\n"
        "for i in range(100000):\n"
        "    open(f'many/f{i:06d}', 'w').close()\n"
        "print('planted')\n"
    )
    try:
        sandbox.put_file("/tmp/plant.py", plant.encode(), agent_readable=True)
        out = _phase(sandbox, "agent", "python3 /tmp/plant.py 2>&1", timeout=300)
        assert "planted" in out, out
        fds_before = len(os.listdir("/proc/self/fd"))
        rss_before = _rss_kb()
        found = sandbox.root_changes()
        assert found is not None
        assert len(os.listdir("/proc/self/fd")) <= fds_before  # none leaked
        assert _rss_kb() - rss_before < 200 * 1024, "listing the root cost the harness >200 MB"
        assert found.truncated and len(found.changes) <= MAX_ROOT_CHANGES
        assert found.total >= 100_000 + 100, found.total
        raw = {
            base64.b64decode(c.path_b64) if c.path_b64 else c.path.encode(): c
            for c in found.changes
        }
        assert raw[b"/srv/drop/\x01caf\xe9"].kind == "added"
        assert b"/srv/drop/\x02line\nbreak" in raw
        assert raw[b"/srv/drop/\x03to-etc"].type == "symlink"
        assert not any(p.startswith(b"/srv/drop/\x03to-etc/") for p in raw)
        assert all("\n" not in c.path for c in found.changes)
    finally:
        sandbox.stop()


def _rss_kb() -> int:
    with open("/proc/self/status", encoding="utf-8") as fh:
        for line in fh:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    raise AssertionError("no VmRSS")


def _deb(tmp_path: Path) -> Path:
    """A local .deb installing /usr/share/harness-probe/hello (built with dpkg-deb here)."""
    pkg = tmp_path / "pkg"
    (pkg / "DEBIAN").mkdir(parents=True)
    (pkg / "DEBIAN" / "control").write_text(
        "Package: harness-probe\nVersion: 1.0\nArchitecture: all\n"
        "Maintainer: test <t@example.invalid>\nDescription: probe\n"
    )
    (pkg / "usr" / "share" / "harness-probe").mkdir(parents=True)
    (pkg / "usr" / "share" / "harness-probe" / "hello").write_text("hello\n")
    out = tmp_path / "harness-probe.deb"
    subprocess.run(["dpkg-deb", "--build", str(pkg), str(out)], check=True, capture_output=True)
    return out


def test_a_tb2_style_test_sh_installs_into_the_root_of_its_own_trial(
    cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Terminal-Bench 2's ``test.sh`` installs its tools when it runs: dpkg -i, /var/lib, /usr.

    Three trials of one image in one run (the third takes a container made ahead, warm):
    each sees only its own root's writes, and all score 1.
    """
    deb = _deb(tmp_path)
    test_sh = (
        "set -e\n"
        "test ! -e /usr/share/harness-probe/hello\n"  # no earlier trial's install
        "dpkg -i /tests/harness-probe.deb\n"
        "mkdir -p /var/lib/apt/lists/partial && echo x > /var/lib/apt/lists/partial/probe\n"
        "grep -q hello /usr/share/harness-probe/hello\n"
        'echo 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n'
    )
    tasks = []
    for label in ("a", "b", "c"):
        name = sec.unique(f"tb2-{label}")
        task = sec.write_task(tmp_path / "tasks", name, attack="true\n", test_sh=test_sh)
        shutil.copy(deb, task / "tests" / deb.name)
        tasks.append((name, task))
    run = cli.run([task for _n, task in tasks], timeout=240)
    assert run.code == 0, run
    records = [run.by_task(name) for name, _task in tasks]
    assert "softly" not in run.stderr, run.stderr
    for record in records:
        assert record["reward"] == 1, (record, str(run))
    assert any(r["sandbox"]["warm"] for r in records), [r["sandbox"] for r in records]
    assert not _trial_mounts(cli.tmpdir)


def _trial_mounts(tmpdir: Path) -> list[str]:
    """Mounts of trial filesystems of runs under ``tmpdir`` (the fs and its layer binds)."""
    from sandbox.storage import binds_of, mounts_under

    return [str(p) for p in (*binds_of(tmpdir), *mounts_under(tmpdir))]


@pytest.mark.parametrize("docker_runtime", ["runc"], indirect=True)
def test_a_killed_harness_leaves_nothing_cleanup_does_not_remove(
    client: Any, cli: Any, sec: Any, tmp_path: Path
) -> None:
    """Attack kill -9 mid-trial: the root layer's bind, the trial fs and its loop device.

    ``harness sandbox cleanup --run`` removes the container, then every mount and loop
    device of the run (judged from /proc, losetup, the engine's layer dir and its dir of
    the container, bound from the trial fs too: ``sandbox/docker/enginefiles.py``).
    """
    name = sec.unique("wroot-kill")
    task = sec.write_task(tmp_path / "tasks", name, attack="sleep 60\n", agent_timeout=90)
    proc = cli.start([task])
    with sec.Watcher(client, f"{sec.TASK_LABEL}={name}") as watcher:
        cid = watcher.wait_for_container(timeout=120)
        upper = Path(watcher.seen[cid]["GraphDriver"]["Data"]["UpperDir"])
        deadline = time.monotonic() + 60
        while not _mounted(upper.parent) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _mounted(upper.parent), "the root layer was never bound"
        engine_dir = Path(str(client.info()["DockerRootDir"])) / "containers" / cid
        assert _mounted(engine_dir), "the engine's dir of the container was never bound"
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
    run_dir = cli.run_dir_of_last()
    assert run_dir is not None
    assert _trial_mounts(cli.tmpdir), "the killed run left no mount to clean (test is void)"
    done = subprocess.run(
        [sys.executable, "-m", "harness", "sandbox", "cleanup", "--run", run_dir.name],
        env=cli.env(),
        capture_output=True,
        text=True,
        timeout=180,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert not _mounted(upper.parent)
    assert not upper.parent.exists()
    assert not _mounted(engine_dir) and not engine_dir.exists()
    assert not _trial_mounts(cli.tmpdir)
    loops = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
    assert str(cli.tmpdir) not in loops, loops
    left = sec.labelled(client, f"{sec.RUN_LABEL}={run_dir.name}")
    assert left["containers"] == [], left


@pytest.mark.parametrize("docker_runtime", ["runc"], indirect=True)
def test_a_compose_tasks_main_container_has_a_writable_capped_root(
    cli: Any, tmp_path: Path
) -> None:
    """The main container of a compose task (sidecars on its network) gets the same root.

    The conformance compose task, its ``test.sh`` first writing ``/usr/local/lib``: it
    still passes with the oracle, and nothing of the trial stays mounted.
    """
    task = tmp_path / "compose-mcp"
    shutil.copytree(Path(__file__).parents[1] / "conformance" / "harbor" / "compose-mcp", task)
    test_sh = task / "tests" / "test.sh"
    lines = test_sh.read_text().splitlines(keepends=True)
    test_sh.write_text(
        lines[0] + "echo probe > /usr/local/lib/compose-probe || exit 3\n" + "".join(lines[1:])
    )
    run = cli.run([task], agent="oracle", timeout=300)
    assert run.code == 0, run
    assert [r["reward"] for r in run.records] == [1], str(run)
    assert not _trial_mounts(cli.tmpdir)


def test_where_the_layer_cannot_be_moved_the_root_is_writable_and_capped_softly(
    client: Any, image: str, sec: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """No trial filesystem on the engine's host (not root, a remote engine): a soft cap.

    A root verifier writes the root (no EROFS), a setuid binary still gives no euid 0, there
    is no listing, the record says the cap is soft, and the run's one warning says why.
    """
    made = DockerRuntime(
        client, ImageResolver(client), run_label=sec.unique("wroot-ro"), host_storage=False
    )
    try:
        with caplog.at_level(logging.WARNING, logger="sandbox.docker.rootlayer"):
            first = _sandbox(made, image, storage_mb=256)
            second = _sandbox(made, image, storage_mb=256)
        try:
            out = _phase(
                first, "verifier", "touch /etc/x 2>&1 && echo wrote; /usr/local/bin/suid-id"
            )
            assert "wrote" in out and "euid=0" not in out, out
            assert first.root_changes() is None and first._rootlayer is None
            limits = first.describe()["limits"]
            assert limits["storage"] == "soft" and limits["enforced"]["storage_mb"] == "soft"
        finally:
            first.stop()
            second.stop()
    finally:
        made.close()
    said = [r.getMessage() for r in caplog.records if "softly" in r.getMessage()]
    assert len(said) == 1 and "not root, or the engine is remote" in said[0], said
