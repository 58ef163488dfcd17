"""The TB2 sample passes with ``oracle`` wherever users run without the host's root.

Issue 35's proof on the six tasks of ``tests/fixtures/tb2`` (``public`` agent and verifier
phases, ``apt-get`` in every ``test.sh``, a solution that needs root), one run each:

- **docker group**: the real CLI as a non-root member of the ``docker`` group, from its
  own venv, against the rootful engine, ``--agent-root allow``;
- **CI image**: ``harness/ci`` with the engine's socket mounted, as ``scripts/ci-image``
  runs it (``--network none``, the work dir at the same path on both sides, this
  checkout's ``harness`` and ``sandbox`` mounted over the image's), ``--agent-root allow``;
- **rootless docker**: the CLI as the rootless engine's user against that engine,
  ``--agent-root isolated``, its second boundary the engine's user namespace.

Every task completes with reward 1 on its first attempt, each phase filtered in the
trial's own namespace (``sandbox.egress = "namespace"``: no host rule is written there),
and the rootless run's records name the boundary that held (``rootless``).

The runs reuse ``test_tb2_sample``'s base aliases (images tagged by the hash of their
sources, built once). The task images are content-addressed too: the docker-group and CI
image runs share the rootful engine's, and the rootless engine keeps its own between runs,
so only a first run there builds them; the alias targets are loaded into the rootless
engine (``docker save | docker load``) when it lacks them.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from support.ci_image import ci_cli
from support.docker import docker_client, require_image
from support.users import (
    ROOTLESS_USER,
    UserHarness,
    docker_group_user,
    rootless_engine,
    run_args,
    user_harness,
)
from test_tb2_sample import FIXTURES, _aliases, rewards

pytestmark = [pytest.mark.docker, pytest.mark.root]

ROOTFUL = "unix:///var/run/docker.sock"
#: Every task of the sample (``base`` and ``published`` hold none at their top).
TASKS = tuple(sorted(p.name for p in FIXTURES.iterdir() if (p / "task.toml").is_file()))
COMMON = ("--agent", "oracle", "--force-build", "-j", "2")


@pytest.fixture(scope="module")
def aliases() -> list[str]:
    """``--base-alias`` for every base of the sample, built here unless present."""
    return _aliases()


def _copy_sample(into: Path) -> Path:
    tasks = into / "tb2"
    for name in TASKS:
        shutil.copytree(FIXTURES / name, tasks / name)
    return tasks


def _targets(aliases: list[str]) -> list[str]:
    """The alias targets (``NAME=TARGET`` after each ``--base-alias``)."""
    return sorted({arg.split("=", 1)[1] for arg in aliases if "=" in arg})


def _load_into(host: str, images: list[str]) -> None:
    """Each image, as the rootful engine has it, loaded into the engine at ``host``."""
    for image in images:
        want = subprocess.run(
            ["docker", "image", "inspect", "--format", "{{.Id}}", image],
            capture_output=True, text=True, check=True,
        ).stdout.strip()  # fmt: skip
        have = subprocess.run(
            ["docker", "-H", host, "image", "inspect", "--format", "{{.Id}}", image],
            capture_output=True, text=True,
        ).stdout.strip()  # fmt: skip
        if want == have:
            continue
        save = subprocess.Popen(["docker", "save", image], stdout=subprocess.PIPE)
        assert save.stdout is not None
        loaded = subprocess.run(
            ["docker", "-H", host, "load", "-q"], stdin=save.stdout, capture_output=True,
            text=True, timeout=900,
        )  # fmt: skip
        save.stdout.close()
        assert save.wait() == 0 and loaded.returncode == 0, loaded.stderr


def _as_user(user: UserHarness, host: str, aliases: list[str], *options: str) -> tuple[Any, Path]:
    work = user.workdir()
    tasks = _copy_sample(work)
    user.give(work)
    out = work / "out"
    result = user.cli(*run_args(tasks, out, *COMMON, *aliases, *options), docker_host=host,
                      timeout=3600)  # fmt: skip
    return result, out


def _in_ci_image(tmp_path: Path, aliases: list[str]) -> tuple[Any, Path]:
    """The run in ``harness/ci``, as ``scripts/ci-image`` runs it."""
    work = tmp_path / "ci"
    tasks = _copy_sample(work)
    out = work / "out"
    options = (*COMMON, *aliases, "--agent-root", "allow")
    return ci_cli(work, *run_args(tasks, out, *options)), out


@pytest.mark.parametrize("where", ["docker-group", "ci-image", "rootless"])
def test_the_oracle_passes_the_tb2_sample_without_the_hosts_root(
    where: str, e2e: Any, tmp_path: Path, aliases: list[str]
) -> None:
    require_image(docker_client())
    if where == "docker-group":
        user = user_harness(docker_group_user())
        result, out = _as_user(user, ROOTFUL, aliases, "--agent-root", "allow")
    elif where == "ci-image":
        result, out = _in_ci_image(tmp_path, aliases)
    else:
        host = rootless_engine()
        _load_into(host, _targets(aliases))
        user = user_harness(ROOTLESS_USER)
        result, out = _as_user(user, host, aliases, "--agent-root", "isolated")
    assert out.is_dir(), result  # a run refused before it starts makes no run dir
    assert result.returncode == 0, result
    records = {
        record["task"]["key"].rsplit("/", 1)[-1]: record
        for record in e2e.read_run(e2e.only_run_dir(out)).records
    }
    assert rewards(records) == {name: ("completed", 1.0) for name in TASKS}, result.stderr
    for name, record in records.items():
        assert record["attempt"] == 1, (name, record["attempt"])
        sandbox = record["sandbox"]
        # Not root in the engine's network namespace: each trial's own namespace filter.
        assert sandbox["egress"] == "namespace", (name, sandbox)
        identity = sandbox["agent_identity"]
        if where == "rootless":
            assert identity["rule"] == "isolated" and identity["boundary"] == "rootless"
        else:
            assert identity["rule"] == "allow", (name, identity)
