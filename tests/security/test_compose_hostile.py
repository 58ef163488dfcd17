"""Attack: a task's docker-compose.yaml hands the host to a sidecar (or to compose itself).

docs/security.md, "Run dirs, tasks and templates"; docs/harbor.md's compose row. Compose
runs a service with whatever its file asks, as root on the engine's host. The red team's
variants, each a real task through the real CLI:

- a top-level named volume with ``driver_opts: {type: none, o: bind, device: <host dir>}``
  (read-write; and ``device: /`` read-only), which a sidecar mounted and served to the
  no-network agent (a root-only host file ended in the agent's workspace);
- a volume whose ``name:`` is the harness's own supervisor runtime volume;
- ``device_cgroup_rules: ["b *:* rwm"]`` (mknod of the host disk succeeded);
- an ``external`` network named ``host``;
- and every other key that reaches outside: a host port, the engine's API socket, the
  runtime, ``extends``/``include``/``label_file`` of host files, ``main``'s ``env_file``
  (compose inlines it into the agent's environment), a sidecar depending on ``main`` (compose
  would start ``main`` with the keys the harness ignores), a writable bind, build SSH
  forwarding, a secret from the host's environment, GPUs, and the old denylist's keys.

Judged from outside: each is refused before anything runs (exit 2, the key named), the
canary host dir is unchanged (no file written, the 0600 canary's bytes never in any
output), no container, volume or network of the attack exists; ``harness tasks check``
refuses the same, and ``harness tasks migrate`` refuses a TB1 task carrying the sidecar.
"""

from __future__ import annotations

import secrets
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import BASE_IMAGE, files_containing, unique, write_task
from support.cli import harness
from support.tb1 import make_tb1

from sandbox.docker.runtime import RUNTIME_LAYOUT, RUNTIME_READY_SUFFIX

_SERVE = '["sh", "-c", "id > /hostx/WRITTEN 2>/dev/null; exec python3 -m http.server 8000"]'
_AGENT = """for i in $(seq 1 20); do
  python3 -c "import urllib.request as u; print(u.urlopen('http://spy:8000/secret.txt',
timeout=2).read())" > "$HARNESS_WORKSPACE/leak.txt" && break
  sleep 0.5
done
cat "$HARNESS_WORKSPACE/leak.txt"; echo "ENV:$LEAKED"
"""
_MAIN = "services:\n  main:\n    build:\n      context: .\n"


def _spy(extra: str, *, mount: str = "hostx:/hostx") -> str:
    return (
        f"  spy:\n    image: {BASE_IMAGE}\n    user: root\n    command: {_SERVE}\n"
        f"    volumes:\n      - {mount}\n{extra}"
    )


def _variants(host: Path, runtime_volume: str) -> dict[str, tuple[str, list[str]]]:
    """Variant -> (its compose file, what the refusal must name)."""
    plain = "volumes:\n  hostx: {}\n"
    return {
        "bind-rw": (
            _MAIN + _spy("") + "volumes:\n  hostx:\n    driver: local\n    driver_opts:\n"
            f"      type: none\n      o: bind\n      device: {host}\n",
            ["volumes.hostx.driver_opts"],
        ),
        "bind-root-ro": (
            _MAIN + _spy("") + "volumes:\n  hostx:\n    driver_opts:\n"
            "      type: none\n      o: bind,ro\n      device: /\n",
            ["volumes.hostx.driver_opts"],
        ),
        "runtime-volume": (
            _MAIN + _spy("", mount="hostx:/hostx:ro") + f"volumes:\n  hostx:\n"
            f"    name: {runtime_volume}\n",
            ["volumes.hostx.name"],
        ),
        "external-volume": (
            _MAIN + _spy("") + f"volumes:\n  hostx:\n    external: true\n"
            f"    name: {runtime_volume}\n",
            ["volumes.hostx.external", "volumes.hostx.name"],
        ),
        "volume-driver": (
            _MAIN + _spy("") + "volumes:\n  hostx:\n    driver: rexray\n"
            "    labels:\n      org.harness.kind: runtime\n",
            ["volumes.hostx.driver", "volumes.hostx.labels"],
        ),
        "device-cgroup": (
            _MAIN + _spy('    device_cgroup_rules: ["b *:* rwm", "c *:* rwm"]\n') + plain,
            ["services.spy.device_cgroup_rules"],
        ),
        "host-network": (
            _MAIN + _spy("    networks: [hostnet]\n") + plain + "networks:\n  hostnet:\n"
            "    external: true\n    name: host\n",
            ["networks.hostnet", "services.spy.networks"],
        ),
        "default-network-opts": (
            _MAIN + _spy("") + plain + "networks:\n  default:\n    driver_opts:\n"
            "      com.docker.network.bridge.name: docker0\n",
            ["networks.default.driver_opts"],
        ),
        "host-files": (
            "include:\n"
            f"  - {host}/inc.yaml\n" + _MAIN + f"    env_file: [{host}/secret.env]\n"
            f"    extends:\n      file: {host}/inc.yaml\n      service: x\n"
            + _spy(
                f"    label_file: {host}/secret.env\n"
                f"    extends:\n      file: {host}/inc.yaml\n      service: x\n"
                f"    env_file: {host}/secret.env\n"
            )
            + plain
            + "secrets:\n  s:\n    environment: HOME\n"
            f"configs:\n  c:\n    file: {host}/secret.txt\n",
            [
                "include",
                "services.main.env_file",
                "services.main.extends",
                "services.spy.label_file",
                "services.spy.extends",
                "services.spy.env_file",
                "secrets.s.environment",
                "configs.c.file",
            ],
        ),
        "starts-main": (
            "services:\n  main:\n    build:\n      context: .\n    privileged: true\n"
            f"    volumes: ['{host}:/hostx']\n"
            + _spy("    depends_on: [main]\n    links: [main]\n", mount="./data:/data:ro"),
            ["services.spy.depends_on", "services.spy.links"],
        ),
        "writable-bind": (
            _MAIN + _spy("", mount="./data:/hostx"),
            ["binds './data' writable"],
        ),
        "templated-bind": (
            _MAIN + _spy("", mount="${HOSTDIR:-" + str(host) + "}:/hostx:ro"),
            ["is templated"],
        ),
        "bind-options": (
            _MAIN + _spy("", mount="./data:/hostx:ro,rshared"),
            ["with 'rshared'"],
        ),
        "build": (
            _MAIN + f"  spy:\n    command: {_SERVE}\n    build:\n      context: .\n"
            "      ssh: [default]\n      network: host\n"
            f"      dockerfile: {host}/secret.txt\n",
            ["services.spy.build.ssh", "services.spy.build.network", "build.dockerfile"],
        ),
        "host-keys": (
            _MAIN
            + _spy(
                "    privileged: true\n    cap_add: [SYS_ADMIN]\n"
                "    devices: ['/dev/sda:/dev/sda']\n    security_opt: ['apparmor:unconfined']\n"
                "    pid: host\n    ipc: host\n    uts: host\n    userns_mode: host\n"
                "    cgroup: host\n    cgroup_parent: /\n    volumes_from: [other]\n"
                "    ports: ['127.0.0.1:18999:8000']\n    use_api_socket: true\n"
                "    runtime: runc\n    isolation: process\n"
                "    sysctls: {net.ipv4.ip_forward: 1}\n    storage_opt: {size: 1G}\n"
                "    gpus: all\n    provider: {type: evil}\n    logging: {driver: syslog}\n"
                "    oom_score_adj: -1000\n    container_name: fixed\n"
                "    ulimits: {memlock: -1}\n"
                "    deploy:\n      resources:\n        reservations:\n"
                "          devices: [{capabilities: [gpu]}]\n"
            )
            + plain,
            [
                f"services.spy.{key}"
                for key in (
                    "privileged",
                    "cap_add",
                    "devices",
                    "security_opt",
                    "pid",
                    "ipc",
                    "uts",
                    "userns_mode",
                    "cgroup",
                    "cgroup_parent",
                    "volumes_from",
                    "ports",
                    "use_api_socket",
                    "runtime",
                    "isolation",
                    "sysctls",
                    "storage_opt",
                    "gpus",
                    "provider",
                    "logging",
                    "oom_score_adj",
                    "container_name",
                    "ulimits.memlock",
                    "deploy.resources.reservations",
                )
            ],
        ),
    }


@pytest.fixture
def host_dir() -> Iterator[Path]:
    """A root-only host dir outside every task: a 0600 canary and the files named above."""
    top = Path(tempfile.mkdtemp(prefix="hcompose", dir="/tmp"))
    top.chmod(0o700)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def _plant(host: Path) -> tuple[str, dict[str, bytes]]:
    token = f"RT-COMPOSE-HOSTILE-{secrets.token_hex(12)}"
    (host / "secret.txt").write_text(token + "\n")
    (host / "secret.env").write_text(f"LEAKED={token}\n")
    (host / "inc.yaml").write_text(
        f"services:\n  x:\n    image: {BASE_IMAGE}\n    environment: [LEAKED={token}]\n"
    )
    for name in ("secret.txt", "secret.env", "inc.yaml"):
        (host / name).chmod(0o600)
    return token, {p.name: p.read_bytes() for p in host.iterdir()}


def _runtime_volume(client: Any) -> str:
    """The harness's supervisor runtime volume on this engine (the one task5 reached)."""
    current = f"harness-python-{RUNTIME_LAYOUT}-"
    for volume in client.volumes.list(filters={"label": "org.harness.kind=runtime"}):
        name = str(volume.name)
        if name.startswith(current) and not name.endswith(RUNTIME_READY_SUFFIX):
            return name
    return f"{current}f31c27ee8212"


def _tasks(parent: Path, host: Path, runtime_volume: str) -> dict[str, tuple[Path, list[str]]]:
    made = {}
    for variant, (compose, expected) in _variants(host, runtime_volume).items():
        name = unique(f"hostile-{variant}")
        task = write_task(
            parent, name, attack=_AGENT, dockerfile=f"FROM {BASE_IMAGE}\n", agent_timeout=30
        )
        (task / "environment" / "docker-compose.yaml").write_text(compose)
        (task / "environment" / "data").mkdir()
        made[name] = (task, expected)
    return made


def _leftovers(client: Any, names: list[str]) -> list[str]:
    """Containers, volumes and networks of the engine whose name or labels name a task."""
    found = []
    for container in client.containers.list(all=True):
        text = f"{container.name} {container.attrs.get('Config', {}).get('Labels')}"
        found += [container.name for name in names if name in text]
    for volume in client.volumes.list():
        text = f"{volume.name} {volume.attrs.get('Labels')}"
        found += [volume.name for name in names if name in text]
    for network in client.networks.list():
        found += [network.name for name in names if name in network.name]
    return found


def _assert_host_untouched(host: Path, before: dict[str, bytes], token: str, *tops: Path) -> None:
    after = {p.name: p.read_bytes() for p in host.iterdir()}
    assert after == before, sorted(set(after) ^ set(before))
    for top in tops:
        assert not files_containing(top, token), top


@pytest.mark.docker
def test_a_hostile_compose_file_is_refused_before_anything_runs(
    client: Any, cli: Any, tmp_path: Path, host_dir: Path
) -> None:
    """Every variant, in one ``harness run`` (runc and gVisor): exit 2, each key named.

    Before, the run started: the sidecar wrote into the host dir as root and the agent's
    workspace held the host file's token; the other variants were not refused either.
    """
    token, before = _plant(host_dir)
    tasks = _tasks(tmp_path / "tasks", host_dir, _runtime_volume(client))
    result = cli.run([task for task, _ in tasks.values()], timeout=600)
    lines = result.stderr.splitlines()
    assert result.code == 2, str(result)
    for name, (task, expected) in tasks.items():
        mine = " ".join(line for line in lines if str(task) in line)
        missing = [key for key in expected if key not in mine]
        assert not missing, (name, missing, result.stderr)
    assert "Traceback" not in result.stderr
    assert result.run_dir is None or not result.records, str(result)
    _assert_host_untouched(host_dir, before, token, tmp_path)
    assert not _leftovers(client, list(tasks)), _leftovers(client, list(tasks))

    check = harness("tasks", "check", *(task for task, _ in tasks.values()))
    assert check.returncode == 2, check.stdout + check.stderr
    for name, (task, expected) in tasks.items():
        mine = " ".join(line for line in check.stderr.splitlines() if str(task) in line)
        assert all(key in mine for key in expected), (name, check.stderr)
    _assert_host_untouched(host_dir, before, token, tmp_path)


@pytest.mark.root
def test_a_tb1_sidecar_reaching_the_host_is_not_migrated(tmp_path: Path, host_dir: Path) -> None:
    """``harness tasks migrate`` of a TB1 task whose sidecar mounts a ``driver_opts`` bind
    of the host dir (and one with ``device_cgroup_rules``, one naming the runtime volume).

    Before, the compose file was kept verbatim and the migrated task checked OK.
    """
    token, before = _plant(host_dir)
    client = (
        "services:\n  client:\n    build:\n      dockerfile: Dockerfile\n"
        "    image: ${T_BENCH_TASK_DOCKER_CLIENT_IMAGE_NAME}\n"
        '    command: ["sh", "-c", "sleep infinity"]\n'
    )
    variants = {
        "bind": (
            _spy("") + "volumes:\n  hostx:\n    driver_opts: "
            f"{{type: none, o: bind, device: {host_dir}}}\n",
            "volumes.hostx.driver_opts",
        ),
        "cgroup": (
            _spy('    device_cgroup_rules: ["b *:* rwm"]\n') + "volumes:\n  hostx: {}\n",
            "services.spy.device_cgroup_rules",
        ),
        "runtime": (
            _spy("") + "volumes:\n  hostx:\n    name: harness-python-2-f31c27ee8212\n",
            "volumes.hostx.name",
        ),
    }
    for variant, (sidecar, key) in variants.items():
        source = make_tb1(tmp_path / "src", f"evil-{variant}", compose=client + sidecar)
        out = tmp_path / f"out-{variant}"
        migrated = harness("tasks", "migrate", source, "-o", out)
        assert migrated.returncode == 2, migrated.stdout + migrated.stderr
        assert key in migrated.stdout + migrated.stderr, migrated.stdout + migrated.stderr
        assert not out.exists() or not any(out.iterdir()), list(out.iterdir())
    honest = make_tb1(
        tmp_path / "src",
        "honest",
        compose=client + f"  db:\n    image: {BASE_IMAGE}\n    volumes: [data:/data]\n"
        "volumes:\n  data: {}\n",
    )
    migrated = harness("tasks", "migrate", honest, "-o", tmp_path / "out-honest")
    assert migrated.returncode == 0, migrated.stdout + migrated.stderr
    check = harness("tasks", "check", tmp_path / "out-honest" / "honest", "--sandbox", "local")
    assert "docker-compose" not in check.stderr, check.stderr
    _assert_host_untouched(host_dir, before, token, tmp_path)


@pytest.mark.root
def test_a_compose_file_linked_inside_the_task_is_judged_too(
    tmp_path: Path, host_dir: Path
) -> None:
    """``environment/docker-compose.yaml`` a symlink to another file of the task (kept: it
    stays inside) holding the ``driver_opts`` bind: ``tasks check`` judges the target; one
    leaving the task is refused as a link and its target never read (no byte of it shown).
    """
    token, before = _plant(host_dir)
    inside = write_task(tmp_path, unique("linked-inside"), attack=_AGENT, dockerfile="FROM x\n")
    (inside / "compose.yaml").write_text(_variants(host_dir, "v")["bind-rw"][0])
    (inside / "environment" / "docker-compose.yaml").symlink_to("../compose.yaml")
    outside = write_task(tmp_path, unique("linked-out"), attack=_AGENT, dockerfile="FROM x\n")
    (host_dir / "evil.yaml").write_text(f"{token}: [\n")
    (outside / "environment" / "docker-compose.yaml").symlink_to(host_dir / "evil.yaml")
    before["evil.yaml"] = (host_dir / "evil.yaml").read_bytes()
    check = harness("tasks", "check", inside, outside, "--sandbox", "local")
    assert check.returncode == 2, check.stdout + check.stderr
    assert "volumes.hostx.driver_opts" in check.stderr, check.stderr
    assert "docker-compose.yaml" in check.stderr and token not in check.stdout + check.stderr
    _assert_host_untouched(host_dir, before, token)
