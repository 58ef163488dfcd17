"""Issue 27's proof on real Terminal-Bench 2 tasks (``tests/fixtures/tb2/``, adapted only to
build offline: see its README).

One run per configuration, ``-j 2``, every task image built once by the first run (the
harness's content-addressed images, ``--force-build`` over each task's ``docker_image``) and
reused by the others:

- the oracle passes every task under ``--runtime runsc --agent-root isolated`` and under runc
  with ``--agent-root allow``;
- with the default ``--agent-root never`` it fails only where the solution needs root
  (build-pmars: see :data:`NEEDS_ROOT`), and the run names up front the tasks whose agent
  Harbor would run as root (all of them: TB2 images run as root);
- ``nop`` scores 0 on every task;
- a published task, unmodified but for its base alias (its ``test.sh`` fetches uv from the
  internet, which this machine cannot reach), builds with ``--force-build`` and its
  ``test.sh``'s ``apt-get update`` writes the image root.

The alias targets (``tests/fixtures/tb2/base/``) are built once and reused, tagged by the
hash of their sources, with the harness's managed label, so ``harness images prune``
removes them.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from support.docker import docker_client, prerequisite_missing, require_image

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "tb2"
#: The sample's smallest tasks (the suite's time; ``bench/tb2_sample.py`` runs all), and
#: build-pmars, whose solution needs root.
TASKS = ("build-pmars", "log-summary-date-ranges", "regex-log", "sparql-university")
#: The tasks whose solution needs root: build-pmars installs build tools with apt-get
#: under ``set -e``. log-summary-date-ranges runs ``apt-get update && apt-get install``
#: too, but bash ignores a failing command before ``&&``, and it then solves the task with
#: the image's tools, so it passes as an unprivileged agent.
NEEDS_ROOT = {"build-pmars"}
pytestmark = pytest.mark.docker


def _load_bases() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tb2_bases", FIXTURES / "base" / "bases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="session")
def tb2_base() -> list[str]:
    """``--base-alias`` for every base image of the sample, the targets built here unless
    present (``tests/fixtures/tb2/base/``: harness/base:bookworm and a Debian 13 rootfs
    made by debootstrap, each with pip, venv and this machine's CA)."""
    require_image(docker_client())
    if shutil.which("debootstrap") is None:
        prerequisite_missing("debootstrap (the Debian 13 base of build-pmars)")
    bases = _load_bases()
    try:
        return list(bases.alias_args())
    except bases.BaseBuildError as exc:
        pytest.fail(str(exc))


def run_sample(
    e2e: Any, tasks: Path, out: Path, aliases: list[str], agent: str, *options: str
) -> tuple[Any, dict[str, dict[str, Any]]]:
    """One run of every task in ``tasks`` (``-j 2``, ``--force-build``): the CLI's result and
    each task's one record, by task name (the folder's name)."""
    result = e2e.run(
        "run", tasks, "--agent", agent, "--sandbox", "docker", "--force-build",
        *aliases, *options, "-j", "2", "-o", out, "--display", "none", "--json",
        timeout=1800,
    )  # fmt: skip
    assert out.is_dir(), result  # a run refused before it starts makes no run dir
    records = e2e.read_run(e2e.only_run_dir(out)).records
    by_name = {record["task"]["key"].rsplit("/", 1)[-1]: record for record in records}
    assert sorted(by_name) == sorted(p.name for p in tasks.iterdir() if p.is_dir()), result
    return result, by_name


def sample(tmp_path: Path) -> Path:
    """The sample's task dirs (without the fixture's ``base``), copied under ``tmp_path``."""
    tasks = tmp_path / "tb2"
    for name in TASKS:
        shutil.copytree(FIXTURES / name, tasks / name)
    return tasks


def rewards(records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {name: (record["status"], record["reward"]) for name, record in records.items()}


@pytest.mark.parametrize(
    "options",
    [
        pytest.param(("--runtime", "runsc", "--agent-root", "isolated"), id="runsc-isolated"),
        pytest.param(("--agent-root", "allow"), id="runc-allow"),
    ],
)
def test_the_oracle_passes_every_task_with_a_root_agent(
    e2e: Any, tmp_path: Path, tb2_base: list[str], options: tuple[str, ...]
) -> None:
    result, records = run_sample(e2e, sample(tmp_path), tmp_path / "runs", tb2_base, "oracle",
                                 *options)  # fmt: skip
    assert rewards(records) == {name: ("completed", 1.0) for name in TASKS}, result


def test_with_the_default_the_oracle_fails_only_where_root_is_needed_and_nop_scores_0(
    e2e: Any, tmp_path: Path, tb2_base: list[str]
) -> None:
    tasks = sample(tmp_path)
    result, records = run_sample(e2e, tasks, tmp_path / "oracle", tb2_base, "oracle")
    # A solution that fails as an unprivileged agent is an agent error, graded 0.
    expected = {
        name: ("agent_error", 0.0) if name in NEEDS_ROOT else ("completed", 1.0) for name in TASKS
    }
    assert rewards(records) == expected, result
    # The run names, before it runs them, the tasks whose agent Harbor would run as root
    # (every TB2 image's user is root): one line per run, naming each.
    output = result.stdout + result.stderr
    lines = [line for line in output.splitlines() if "root" in line]
    for name in TASKS:
        assert any(name in line for line in lines), (name, output)

    nop, nop_records = run_sample(e2e, tasks, tmp_path / "nop", tb2_base, "nop")
    assert rewards(nop_records) == {name: ("completed", 0.0) for name in TASKS}, nop


def test_a_published_task_builds_with_force_build_and_its_test_sh_writes_the_image_root(
    e2e: Any, tmp_path: Path, tb2_base: list[str]
) -> None:
    """``regex-log`` as TB2 publishes it (``tests/fixtures/tb2/published/``, every file
    upstream's). uv's installer is out of reach here, so the reward is 0; the point is
    that ``apt-get update`` succeeds in the verifier, where a read-only root failed it."""
    tasks = tmp_path / "published"
    shutil.copytree(FIXTURES / "published" / "regex-log", tasks / "regex-log")
    published = (tasks / "regex-log" / "environment" / "Dockerfile").read_text()
    assert "FROM ubuntu:24.04" in published and "/opt/tb2-verifier" not in published
    result, records = run_sample(e2e, tasks, tmp_path / "runs", tb2_base, "oracle",
                                 "--agent-root", "allow")  # fmt: skip
    record = records["regex-log"]
    assert record["status"] == "completed", (result, record)
    verifier = e2e.read_run(e2e.only_run_dir(tmp_path / "runs")).evidence(record) / "verifier"
    log = (verifier / "test-stdout.txt").read_text() + (verifier / "test-stderr.txt").read_text()
    # apt-get update wrote /var/lib/apt/lists (and verified the lists' signatures, which
    # needs a /tmp that apt's _apt user can write, as in any Docker container).
    assert "Read-only file system" not in log, log
    assert "Fetched " in log and "is not signed" not in log, log
