"""A real Ray cluster on this machine for tests: a head node and worker node processes.

Every node is started with ``ray start`` (from the project's venv) in a session of its own,
so a test can kill one node's whole process group (its raylet and its worker processes) as
a machine failure would, and :meth:`RayCluster.stop` ends only what it started. Every node
runs on 127.0.0.1 (``RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0``) and takes connections only
with the cluster's own token (``RAY_AUTH_MODE=token``), drivers too (see
:meth:`RayCluster.env`).
"""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import psutil

RAY = Path(sys.executable).with_name("ray")
LOOPBACK = {"RAY_USAGE_STATS_ENABLED": "0"}
HEAD_IP = "127.0.0.2"
"""The head's address; worker node N gets 127.0.0.(2+N) (Ray turns 127.0.0.1 into eth0's)."""


@dataclass
class Node:
    """One node: the session of the ``ray start`` that made it."""

    sid: int
    resources: dict[str, float] = field(default_factory=dict)

    def processes(self) -> list[psutil.Process]:
        found = []
        for proc in psutil.process_iter():
            try:
                if os.getsid(proc.pid) == self.sid:
                    found.append(proc)
            except (OSError, psutil.Error):
                continue
        return found

    def alive(self) -> bool:
        """Whether a process of the node still runs (a zombie has ended: it waits only for
        its parent, or for init, to reap it)."""
        for proc in self.processes():
            try:
                if proc.status() != psutil.STATUS_ZOMBIE:
                    return True
            except psutil.Error:
                continue
        return False

    def kill(self, sig: int = signal.SIGKILL) -> None:
        for proc in self.processes():
            try:
                proc.send_signal(sig)
            except psutil.Error:
                pass


class RayCluster:
    """Start nodes with :meth:`add_node` (the first is the head); :meth:`stop` ends them all."""

    def __init__(self, object_store_mb: int = 100) -> None:
        # Short: Ray's unix socket paths must fit in 107 bytes.
        self.temp_dir = Path(tempfile.mkdtemp(prefix="ray-", dir="/tmp"))
        self.object_store_mb = object_store_mb
        #: Ray's auth token: whoever holds it can run code on the cluster's nodes.
        self.token = secrets.token_hex(32)
        self.token_path = self.temp_dir / "auth_token"
        self.token_path.write_text(self.token)
        self.token_path.chmod(0o600)
        self.nodes: list[Node] = []
        self.address: str | None = None

    def env(self) -> dict[str, str]:
        """The environment a driver needs to join (loopback nodes)."""
        return {
            **os.environ,
            **LOOPBACK,
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN_PATH": str(self.token_path),
        }

    def add_node(
        self,
        cpus: float,
        *,
        timeout: float = 60,
        env: dict[str, str] | None = None,
        ip: str | None = None,
    ) -> Node:
        """Start a node (the head first) with ``cpus`` CPUs; return once it is alive.

        ``ray start`` itself returns only once the head's GCS lists the node it started
        (alive, at its address), so no check of our own follows: one cost a driver's
        start-up, seconds on a loaded machine, for every node.

        ``env`` is added to the node's environment (its workers inherit it): a node of its
        own, e.g. with its own agent cache (``HARNESS_AGENT_CACHE``). ``ip``: the node's
        address (an address of this host), instead of the next loopback one.
        """
        ip = ip or f"127.0.0.{2 + len(self.nodes)}"
        args = [
            str(RAY),
            "start",
            f"--node-ip-address={ip}",
            f"--num-cpus={cpus:g}",
            f"--object-store-memory={self.object_store_mb << 20}",
            "--disable-usage-stats",
        ]
        if self.address is None:
            args += [
                "--head",
                "--port=0",
                "--include-dashboard=false",
                f"--temp-dir={self.temp_dir}",
            ]
        else:
            args += [f"--address={self.address}"]
        proc = subprocess.Popen(
            args,
            env={**self.env(), **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        output, _ = proc.communicate(timeout=timeout)
        node = Node(sid=proc.pid, resources={"CPU": cpus})
        self.nodes.append(node)
        if proc.returncode != 0:
            raise RuntimeError(f"ray start failed:\n{output.decode(errors='replace')}")
        if self.address is None:
            self.address = self._read_address()
        return node

    def _read_address(self) -> str:
        path = self.temp_dir / "ray_current_cluster"
        if not path.exists():
            path = Path("/tmp/ray/ray_current_cluster")
        return path.read_text().strip()

    def alive_addresses(self) -> set[str]:
        """The addresses of the alive nodes, as the head's GCS sees them (none before it)."""
        if self.address is None:
            return set()
        code = (
            "import ray,sys;ray.init(address=sys.argv[1],logging_level='ERROR');"
            "print(' '.join(n['NodeManagerAddress'] for n in ray.nodes() if n['Alive']))"
        )
        out = subprocess.run(
            [sys.executable, "-c", code, self.address],
            env=self.env(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = out.stdout.strip().splitlines()
        return set(lines[-1].split()) if lines else set()

    def wait_for_node(self, ip: str, *, timeout: float = 60) -> None:
        """Wait until the node at ``ip`` is alive.

        By address, not by count: a node killed just before may still count as alive
        until the head notices, and then stop counting while the new one starts.
        """
        deadline = time.monotonic() + timeout
        while ip not in self.alive_addresses():
            if time.monotonic() > deadline:
                raise TimeoutError(f"the Ray node at {ip} is not alive after {timeout}s")
            time.sleep(1)

    def stop(self) -> None:
        """End every node this cluster started (workers first), then remove its temp dir.

        The worker nodes get SIGTERM and up to 10 s to leave the cluster (they take a
        moment); the head is then killed. Its GCS server and autoscaler monitor do not end
        on SIGTERM and its raylet waits 10 s on the GCS before it does, so a grace period
        for the head only ever ran out.
        """
        workers = self.nodes[1:]
        for node in reversed(workers):
            node.kill(signal.SIGTERM)
        deadline = time.monotonic() + 10
        while any(node.alive() for node in workers) and time.monotonic() < deadline:
            time.sleep(0.2)
        for node in reversed(self.nodes):
            node.kill(signal.SIGKILL)
        subprocess.run(["rm", "-rf", str(self.temp_dir)], check=False)
