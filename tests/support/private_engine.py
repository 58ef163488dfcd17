"""A Docker engine of the test's own, to stop, restart and fill without touching anyone else's.

The shared engine is never stopped by a test. :class:`PrivateEngine` starts a second
``dockerd`` with its own data root, exec root, socket and bridge (a bridge of its own: with
``--bridge=none`` dockerd deletes the host's ``docker0`` at start-up), loads the base image
into it from the shared engine, and is always torn down whole: daemon and containerd
stopped, their mounts released, the data dir and the bridge removed.

Point the harness at it with ``DOCKER_HOST=engine.host``.
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import signal
import subprocess
import time
from pathlib import Path
from typing import Any

import docker.errors
import psutil

import docker

BASE_IMAGE = "harness/base:bookworm"
_REPO = Path(__file__).resolve().parents[2]
#: The base image saved after a bootstrap (when the shared engine has none to copy).
_IMAGE_CACHE = Path("/var/tmp/harness-fault-suite-base.tar")
#: Objects every engine has: not leftovers of a test.
_DEFAULT_NETWORKS = {"bridge", "host", "none"}
_RUNTIME_VOLUME = "harness-python-"


def _free_subnet() -> ipaddress.IPv4Network:
    """A /24 in 10.213.0.0/16 that no interface of the host uses."""
    used = subprocess.run(
        ["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True, check=True
    ).stdout
    for third in range(200, 256):
        net = ipaddress.IPv4Network(f"10.213.{third}.0/24")
        if f"10.213.{third}." not in used:
            return net
    raise RuntimeError("no free 10.213.x.0/24 subnet for the private engine's bridge")


class PrivateEngine:
    """A private ``dockerd`` under ``root`` (keep it short: socket paths max 108 bytes).

    Args:
        root: Its dir: data root, exec root, socket, pid file and log go there.
        data_root: Where images and containers go (default ``root/data``); a size-limited
            filesystem makes an engine whose disk fills up.
        resolv_conf: The ``/etc/resolv.conf`` the daemon reads instead of the host's (it
            runs in a mount namespace of its own that sees the host's mounts, the file bound
            over the host's there),
            with the host's network: an engine on a host whose resolver is on loopback.
    """

    def __init__(
        self, root: Path, *, data_root: Path | None = None, resolv_conf: Path | None = None
    ) -> None:
        self.root = root
        self.resolv_conf = resolv_conf
        self.data_root = data_root or root / "data"
        self.sock = root / "d.sock"
        self.host = f"unix://{self.sock}"
        self.bridge = f"hf{secrets.token_hex(3)}"
        self.subnet = _free_subnet()
        self.proc: subprocess.Popen[bytes] | None = None
        self._bridge_made = False

    # -- lifecycle ----------------------------------------------------------------------------

    def _make_bridge(self) -> None:
        gateway = f"{next(self.subnet.hosts())}/{self.subnet.prefixlen}"
        for argv in (
            ["ip", "link", "add", self.bridge, "type", "bridge"],
            ["ip", "addr", "add", gateway, "dev", self.bridge],
            ["ip", "link", "set", self.bridge, "up"],
        ):
            subprocess.run(argv, check=True, capture_output=True)
            self._bridge_made = True

    def start(self, timeout: float = 60) -> None:
        """Start the daemon (again) and wait until it answers."""
        if not self._bridge_made:
            self.root.mkdir(parents=True, exist_ok=True)
            self.data_root.mkdir(parents=True, exist_ok=True)
            self._make_bridge()
        log = (self.root / "dockerd.log").open("ab")
        wrap: list[str] = []
        if self.resolv_conf is not None:
            # exec: the daemon keeps this pid (stop() signals it).
            bind = 'mount --bind "$0" /etc/resolv.conf && exec "$@"'
            wrap = ["unshare", "--mount", "--propagation", "slave", "sh", "-c", bind,
                    str(self.resolv_conf)]  # fmt: skip
        self.proc = subprocess.Popen(
            [
                *wrap,
                "dockerd",
                "--data-root",
                str(self.data_root),
                "--exec-root",
                str(self.root / "exec"),
                "--pidfile",
                str(self.root / "d.pid"),
                "-H",
                self.host,
                f"--bridge={self.bridge}",
                "--iptables=false",
                "--ip-masq=false",
                "--ip-forward=false",
            ],  # fmt: skip
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=log,
            start_new_session=True,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while not self.answers():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                tail = (self.root / "dockerd.log").read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the private dockerd did not come up:\n{tail}")
            time.sleep(0.2)

    def stop(self, timeout: float = 60) -> None:
        """Stop the daemon as ``systemctl stop docker`` does (SIGTERM, wait for it)."""
        proc = self.proc
        if proc is None or proc.poll() is not None:
            return
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()

    def restart(self) -> None:
        """Stop the engine and start it again (its data root, images and all, kept)."""
        self.stop()
        self.start()

    def answers(self) -> bool:
        """Whether the daemon answers a ping now."""
        try:
            client = docker.DockerClient(base_url=self.host, timeout=5)
            try:
                return bool(client.ping())
            finally:
                client.close()
        except Exception:
            return False

    def client(self) -> docker.DockerClient:
        """A client of this engine."""
        return docker.DockerClient(base_url=self.host, timeout=60)

    def load_base_image(self) -> None:
        """Give the engine the base image (it can never be pulled here).

        Copied from the shared engine when that one has it; else bootstrapped offline
        into this engine by ``images/bootstrap-base.sh`` (about a minute).
        """
        if self._has_base_image():
            return
        here = {**os.environ, "DOCKER_HOST": self.host}
        save = subprocess.Popen(
            ["docker", "save", BASE_IMAGE], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        assert save.stdout is not None
        loaded = subprocess.run(
            ["docker", "load", "-q"], stdin=save.stdout, capture_output=True, env=here
        )
        save.stdout.close()
        if save.wait() == 0 and loaded.returncode == 0:
            return
        if _IMAGE_CACHE.is_file():
            with _IMAGE_CACHE.open("rb") as tar:
                if (
                    subprocess.run(
                        ["docker", "load", "-q"], stdin=tar, capture_output=True, env=here
                    ).returncode
                    == 0
                ):
                    return
        built = subprocess.run(
            ["bash", str(_REPO / "images" / "bootstrap-base.sh")],
            capture_output=True,
            text=True,
            env={**os.environ, "DOCKER_HOST": self.host},
        )
        if built.returncode != 0 or not self._has_base_image():
            raise RuntimeError(f"no {BASE_IMAGE} for the private engine:\n{built.stderr[-2000:]}")
        # Kept for the next session (a bootstrap takes minutes); written whole or not at all.
        partial = _IMAGE_CACHE.with_suffix(".part")
        subprocess.run(["docker", "save", "-o", str(partial), BASE_IMAGE], env=here, check=True)
        partial.replace(_IMAGE_CACHE)

    def _has_base_image(self) -> bool:
        client = self.client()
        try:
            client.images.get(BASE_IMAGE)
            return True
        except docker.errors.ImageNotFound:
            return False
        finally:
            client.close()

    def close(self) -> None:
        """Stop everything it started and remove its files and bridge (always safe to call)."""
        with contextlib.suppress(Exception):
            self.stop(timeout=30)
        # containerd and its shims of this exec root (a killed daemon leaves them).
        exec_root = str(self.root / "exec")
        for proc in psutil.process_iter(["cmdline"]):
            with contextlib.suppress(psutil.Error, TypeError):
                if any(exec_root in part for part in proc.info["cmdline"] or []):
                    proc.kill()
        self._release_mounts()
        shutil.rmtree(self.root, ignore_errors=True)
        if self._bridge_made:
            subprocess.run(["ip", "link", "del", self.bridge], capture_output=True)
            self._bridge_made = False

    def _release_mounts(self) -> None:
        root = str(self.root.resolve())
        mounts = Path("/proc/self/mounts").read_text().splitlines()
        points = [line.split()[1] for line in mounts if len(line.split()) > 1]
        for point in sorted((p for p in points if p.startswith(root + "/")), reverse=True):
            subprocess.run(["umount", "-l", point], capture_output=True)

    # -- what is left -------------------------------------------------------------------------

    def counts_a_gone_endpoint(self, network_name: str) -> bool:
        """Whether the engine refuses to remove a network no container is attached to.

        Docker 20.10 can go on counting the endpoint of a removed container ("has active
        endpoints" with none listed); only its restart clears the count. A network that
        is removed here was not held: the answer is False (and it is gone).
        """
        client = self.client()
        try:
            network = client.networks.get(network_name)
            if network.attrs.get("Containers"):
                return False
            try:
                network.remove()
            except docker.errors.APIError as exc:
                return "active endpoints" in str(exc)
            return False
        finally:
            client.close()

    def leftovers(self) -> dict[str, list[str]]:
        """Containers, volumes and networks on the engine but its defaults and the runtime."""
        client = self.client()
        try:
            return {
                "containers": [str(c.name) for c in client.containers.list(all=True)],
                "volumes": [
                    str(v.name)
                    for v in client.volumes.list()
                    if not str(v.name).startswith(_RUNTIME_VOLUME)
                ],
                "networks": [
                    str(n.name)
                    for n in client.networks.list()
                    if str(n.name) not in _DEFAULT_NETWORKS
                ],
            }
        finally:
            client.close()

    def remove_everything(self) -> None:
        """Remove every container, volume and network (a test's own engine only).

        A network the engine still says has active endpoints, with no container left to
        hold them (an engine bug that outlives the containers: only its restart clears
        it), is removed after one restart, so one test's leftover never fails the next.
        """
        client = self.client()
        try:
            for container in client.containers.list(all=True):
                container.remove(force=True, v=True)
            for volume in client.volumes.list():
                if not str(volume.name).startswith(_RUNTIME_VOLUME):
                    volume.remove(force=True)
            stuck = []
            for network in client.networks.list():
                if str(network.name) not in _DEFAULT_NETWORKS:
                    try:
                        network.remove()
                    except docker.errors.APIError as exc:
                        if "active endpoints" not in str(exc):
                            raise
                        stuck.append(str(network.name))
        finally:
            client.close()
        if stuck:
            self.restart()
            client = self.client()
            try:
                for name in stuck:
                    client.networks.get(name).remove()
            finally:
                client.close()

    def __repr__(self) -> str:
        return f"PrivateEngine({self.host})"


def started_engine(root: Path, **kwargs: Any) -> PrivateEngine:
    """A running private engine with the base image (closed again if it cannot start)."""
    engine = PrivateEngine(root, **kwargs)
    try:
        engine.start()
        engine.load_base_image()
    except BaseException:
        engine.close()
        raise
    return engine


__all__ = ["BASE_IMAGE", "PrivateEngine", "started_engine"]
