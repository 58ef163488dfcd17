"""Issue 27's proof on real Terminal-Bench 2 tasks (``tests/fixtures/tb2/``, adapted only to
build offline: see its README).

One run per configuration, ``-j 2``, every task image built once before them (``harness
images build``, the harness's content-addressed images, ``--force-build`` over each task's
``docker_image``) and reused by the runs, which pass ``--force-build`` too:

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

The gVisor run is most of the module's time (its oracles fork thousands of processes, and
every fork is slow under gVisor), so it starts in the background once the images exist and
the runc runs go on meanwhile; its test, the module's last, waits for it.
"""

from __future__ import annotations

import importlib.util
import shutil
from collections.abc import Iterator
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
#: The image builds of :func:`sample_images`, two at a time: each a half of the sample.
BUILD_HALVES = (("build-pmars", "regex-log"), ("log-summary-date-ranges", "sparql-university"))
GVISOR = ("--runtime", "runsc", "--agent-root", "isolated")
GVISOR_TEST = "test_under_gvisor_the_oracle_passes_every_task_with_an_isolated_root_agent"
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


def run_args(tasks: Path, out: Path, aliases: list[str], agent: str, *options: str) -> list[Any]:
    """``harness run``'s arguments: every task in ``tasks``, ``-j 2``, ``--force-build``."""
    return [
        "run", tasks, "--agent", agent, "--sandbox", "docker", "--force-build",
        *aliases, *options, "-j", "2", "-o", out, "--display", "none", "--json",
    ]  # fmt: skip


def run_records(
    e2e: Any, result: Any, tasks: Path, out: Path
) -> tuple[Any, dict[str, dict[str, Any]]]:
    """A finished run's result and each task's one record, by task name (the folder's)."""
    assert out.is_dir(), result  # a run refused before it starts makes no run dir
    records = e2e.read_run(e2e.only_run_dir(out)).records
    by_name = {record["task"]["key"].rsplit("/", 1)[-1]: record for record in records}
    assert sorted(by_name) == sorted(p.name for p in tasks.iterdir() if p.is_dir()), result
    return result, by_name


def run_sample(
    e2e: Any, tasks: Path, out: Path, aliases: list[str], agent: str, *options: str
) -> tuple[Any, dict[str, dict[str, Any]]]:
    """One run of every task in ``tasks`` (see :func:`run_args`): the CLI's result and each
    task's one record, by task name (the folder's name)."""
    result = e2e.run(*run_args(tasks, out, aliases, agent, *options), timeout=1800)
    return run_records(e2e, result, tasks, out)


def sample(tmp_path: Path, names: tuple[str, ...] = TASKS) -> Path:
    """The sample's task dirs (without the fixture's ``base``), copied under ``tmp_path``."""
    tasks = tmp_path / "tb2"
    for name in names:
        shutil.copytree(FIXTURES / name, tasks / name)
    return tasks


@pytest.fixture(scope="module")
def sample_images(e2e: Any, tmp_path_factory: pytest.TempPathFactory, tb2_base: list[str]) -> None:
    """Every sample task's image, built (or found) before any run starts.

    Runs that overlap (the gVisor one goes on in the background) then never build one
    image twice at once: each finds it, by its content hash, already there. The two halves
    of the sample build at the same time (one ``harness images build`` each).
    """
    builds = []
    for number, names in enumerate(BUILD_HALVES):
        tasks = sample(tmp_path_factory.mktemp(f"images{number}"), names)
        builds.append(e2e.start("images", "build", "--force-build", *tb2_base, tasks))
    for build in builds:
        result = build.wait(1800)
        assert result.code == 0, result


@pytest.fixture(scope="module", autouse=True)
def gvisor_run(
    request: pytest.FixtureRequest,
    e2e: Any,
    tmp_path_factory: pytest.TempPathFactory,
    tb2_base: list[str],
    sample_images: None,
) -> Iterator[dict[str, Any]]:
    """The oracle's run under gVisor (``GVISOR``), started before the module's first test
    when its test is selected: ``{"running", "tasks", "out"}``, or ``{}``.

    Its test waits for it; one that never did (a failure before it) has it interrupted
    (Ctrl-C: the run stops its trials and cleans up) at the module's end.
    """
    if not any(
        getattr(item, "originalname", None) == GVISOR_TEST for item in request.session.items
    ):
        yield {}
        return
    tmp = tmp_path_factory.mktemp("gvisor")
    tasks, out = sample(tmp), tmp / "runs"
    running = e2e.start(*run_args(tasks, out, tb2_base, "oracle", *GVISOR), output=tmp / "cli")
    try:
        yield {"running": running, "tasks": tasks, "out": out}
    finally:
        if running.proc.poll() is None:
            running.interrupt()


def rewards(records: dict[str, dict[str, Any]]) -> dict[str, Any]:
    return {name: (record["status"], record["reward"]) for name, record in records.items()}


def test_under_runc_the_oracle_passes_every_task_with_an_allowed_root_agent(
    e2e: Any, tmp_path: Path, tb2_base: list[str]
) -> None:
    result, records = run_sample(e2e, sample(tmp_path), tmp_path / "runs", tb2_base, "oracle",
                                 "--agent-root", "allow")  # fmt: skip
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


def test_under_gvisor_the_oracle_passes_every_task_with_an_isolated_root_agent(
    e2e: Any, gvisor_run: dict[str, Any]
) -> None:
    """The run :func:`gvisor_run` started (``--runtime runsc --agent-root isolated``)."""
    result = gvisor_run["running"].wait(1800)
    result, records = run_records(e2e, result, gvisor_run["tasks"], gvisor_run["out"])
    assert rewards(records) == {name: ("completed", 1.0) for name in TASKS}, result
