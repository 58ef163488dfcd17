"""Issue 27's proof on real Terminal-Bench 2 tasks (``tests/fixtures/tb2/``, adapted only to
build offline: see its README).

One run per configuration, ``-j 2``, each sample task's image
built once before them (``harness images build``, the harness's content-addressed images,
``--force-build`` over each task's ``docker_image``) and reused by the runs, which pass
``--force-build`` too:

- the oracle passes every task under runc with ``--agent-root allow``, and under
  ``--runtime runsc --agent-root isolated`` (all but one, see below);
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

Under gVisor the suite runs the sample without log-summary-date-ranges, whose oracle forks
thousands of processes, each slow under gVisor: 7 minutes of both cores, where runc takes
40 s, and more than any other module of the suite costs. ``bench/tb2_sample.py --runtime
runsc --agent-root isolated`` runs every task of the sample under gVisor, that one included.
The gVisor run starts in the background once the sample's images exist, and the runc runs
go on meanwhile; its test, the module's last, waits for it.
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
#: The image builds of :func:`sample_images`, at the same time: build-pmars' (apt-get and
#: pip) takes about as long as the others' (pip) one after another.
BUILD_SETS = (("build-pmars",), ("log-summary-date-ranges", "regex-log", "sparql-university"))
GVISOR = ("--runtime", "runsc", "--agent-root", "isolated")
#: The sample's task left out of the gVisor run (see the module's docstring).
GVISOR_LEFT_OUT = "log-summary-date-ranges"
GVISOR_TEST = "test_under_gvisor_the_oracle_passes_the_sample_with_an_isolated_root_agent"
pytestmark = pytest.mark.docker


def _load_bases() -> ModuleType:
    spec = importlib.util.spec_from_file_location("tb2_bases", FIXTURES / "base" / "bases.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _aliases(releases: set[str] | None = None) -> list[str]:
    require_image(docker_client())
    if shutil.which("debootstrap") is None:
        prerequisite_missing("debootstrap (the Debian 13 base of build-pmars)")
    bases = _load_bases()
    try:
        return list(bases.alias_args(releases))
    except bases.BaseBuildError as exc:
        pytest.fail(str(exc))


# Module-scoped like gvisor_runs, which must come first: pytest sets up a wider scope's
# fixtures before an autouse one of a narrower scope.
@pytest.fixture(scope="module")
def tb2_base() -> list[str]:
    """``--base-alias`` for every base image of the sample, the targets built here unless
    present (``tests/fixtures/tb2/base/``: harness/base:bookworm and a Debian 13 rootfs
    made by debootstrap, each with pip, venv and this machine's CA)."""
    return _aliases()


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


def build_images(e2e: Any, aliases: list[str], *task_sets: Path) -> None:
    """``harness images build --force-build`` of each task set, all at the same time."""
    builds = [e2e.start("images", "build", "--force-build", *aliases, t) for t in task_sets]
    for build in builds:
        result = build.wait(1800)
        assert result.code == 0, result


@pytest.fixture(scope="module")
def sample_images(e2e: Any, tmp_path_factory: pytest.TempPathFactory, tb2_base: list[str]) -> None:
    """Every sample task's image, built (or found) before the runs that overlap start.

    They then never build one image twice at once: each finds it, by its content hash,
    already there. The sets of :data:`BUILD_SETS` build at the same time.
    """
    sets = [sample(tmp_path_factory.mktemp("images"), names) for names in BUILD_SETS]
    build_images(e2e, tb2_base, *sets)


@pytest.fixture(scope="module", autouse=True)
def gvisor_runs(
    request: pytest.FixtureRequest, e2e: Any, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[list[dict[str, Any]]]:
    """The oracle's run under gVisor (``GVISOR``) of the sample but :data:`GVISOR_LEFT_OUT`,
    started in the background once every image of the sample exists (:func:`sample_images`)
    when its test is selected (else none), as ``{"running", "tasks", "out"}``.

    Its test waits for it; a run it never waited for (a failure before it) is interrupted at
    the module's end (Ctrl-C: the run stops its trials and cleans up).
    """
    if not any(
        getattr(item, "originalname", None) == GVISOR_TEST for item in request.session.items
    ):
        yield []
        return
    tmp = tmp_path_factory.mktemp("gvisor")
    started: list[dict[str, Any]] = []
    try:
        request.getfixturevalue("sample_images")
        names = tuple(name for name in TASKS if name != GVISOR_LEFT_OUT)
        tasks, out = sample(tmp, names), tmp / "runs"
        args = run_args(tasks, out, request.getfixturevalue("tb2_base"), "oracle", *GVISOR)
        running = e2e.start(*args, output=tmp / "cli")
        started.append({"running": running, "tasks": tasks, "out": out})
        yield started
    finally:
        for run in started:
            if run["running"].proc.poll() is None:
                run["running"].interrupt()


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


def test_under_gvisor_the_oracle_passes_the_sample_with_an_isolated_root_agent(
    e2e: Any, gvisor_runs: list[dict[str, Any]]
) -> None:
    """The run :func:`gvisor_runs` started (``--runtime runsc --agent-root isolated``): every
    task of the sample but :data:`GVISOR_LEFT_OUT`."""
    records: dict[str, dict[str, Any]] = {}
    results = []
    for run in gvisor_runs:
        result = run["running"].wait(1800)
        results.append(result)
        records.update(run_records(e2e, result, run["tasks"], run["out"])[1])
    expected = {name: ("completed", 1.0) for name in TASKS if name != GVISOR_LEFT_OUT}
    assert rewards(records) == expected, results
