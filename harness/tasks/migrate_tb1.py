"""Terminal-Bench 1 tasks converted into the Harbor task layout (``harness tasks migrate``).

A TB1 task dir holds ``task.yaml`` (``instruction``, ``max_agent_timeout_sec``,
``max_test_timeout_sec``, metadata), ``Dockerfile``, ``docker-compose.yaml`` (a ``client``
service templated with ``T_BENCH_*`` variables), ``run-tests.sh`` (its exit code is the
verdict), ``solution.sh`` (or ``solution.yaml``) and ``tests/``. Each part is mapped as
Harbor's own mapper does:

* ``instruction`` → ``instruction.md``; the timeouts → ``[agent]``/``[verifier]``
  ``timeout_sec``; author, difficulty, category, tags, time estimates → ``[metadata]``;
* the Dockerfile and its build context → ``environment/``; a compose file that is only the
  standard client collapses into the Dockerfile (its extra ``environment``, ``working_dir``,
  ``expose`` become ``ENV``/``WORKDIR``/``EXPOSE``), any other becomes
  ``environment/docker-compose.yaml`` with a ``main`` service and the ``T_BENCH_*``
  variables translated;
* the client's bind mounts of the task's own files (``./tests:/app/tests:ro``,
  ``.:/app``...): the verifier's files (``tests/``, ``run-tests.sh``) are put at the mount
  point by ``tests/test.sh`` when grading starts (the agent does not see them, as under
  Harbor), any other file is copied into the image there (``COPY``), a missing one is an
  empty dir, as Docker makes it;
* ``run-tests.sh`` and ``tests/`` → ``tests/``, with a ``tests/test.sh`` that runs it and
  writes the reward from its exit code (1 for 0, else 0);
* ``solution.sh`` → ``solution/solve.sh`` (a ``solution.yaml``'s commands are written
  into one).

What cannot be mapped is reported per task, never dropped silently.

The TB1 task dir is hostile input: it is first copied, without following any link, into a
private snapshot of regular files and dirs (``harness.tasks.tb1_source``: a symlink
leaving the task, a FIFO or device, a task past the size caps, a YAML file expanding past
its caps is refused, naming it), and the conversion reads only that. The Harbor task is
written into a fresh private dir beside the destination, every file created anew by dir
fd and never through a link (``harness.tasks.tb1_output``), and renamed into place when
whole: a destination that exists already is refused, never written into.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from harness.config.toml import to_toml
from harness.tasks.tb1_output import NewTree
from harness.tasks.tb1_source import MigrationError, load_yaml, snapshot_task
from sandbox.docker.compose_check import compose_problems

TB1_TASK_YAML = "task.yaml"
_RUN_TESTS = "run-tests.sh"
_COMPOSE = "docker-compose.yaml"
_HANDLED = {TB1_TASK_YAML, "solution.sh", "solution.yaml", _RUN_TESTS, "tests", _COMPOSE}
#: task.yaml keys that go to [metadata] as they are.
_METADATA_KEYS = (
    "author_name",
    "author_email",
    "difficulty",
    "category",
    "tags",
    "estimated_duration_sec",
    "expert_time_estimate_min",
    "junior_time_estimate_min",
)
#: task.yaml keys with no meaning outside TB1's tmux harness: dropped without a note.
_SILENT_KEYS = {"disable_asciinema", "run_tests_in_same_shell"}
#: The standard client's volumes and env (TB1's logs mounts and test dir), dropped.
_DEFAULT_VOLUMES = {
    "${T_BENCH_TASK_LOGS_PATH}:${T_BENCH_CONTAINER_LOGS_PATH}",
    "${T_BENCH_TASK_AGENT_LOGS_PATH}:${T_BENCH_CONTAINER_AGENT_LOGS_PATH}",
}
_DEFAULT_ENV = {"TEST_DIR=${T_BENCH_TEST_DIR}"}
#: Service keys the harness provides itself for the main container.
_MAIN_REPLACED = {"build", "image", "container_name", "command", "volumes", "deploy"}
_COLLAPSIBLE = _MAIN_REPLACED | {"environment", "working_dir", "expose"}
#: T_BENCH_* variables and what they become.
_T_BENCH = {
    "T_BENCH_TEST_DIR": "/tests",
    "T_BENCH_CONTAINER_LOGS_PATH": "/logs",
    "T_BENCH_CONTAINER_AGENT_LOGS_PATH": "/logs/agent",
    "T_BENCH_TASK_DOCKER_NAME_PREFIX": "tb",
}
#: A helper script run or sourced from the tests dir (``source $TEST_DIR/setup-uv-pytest.sh``).
_TEST_DIR_FILE = re.compile(
    r"(?:^|[;&|]|\s)(?:source|\.|bash|sh)\s+\"?\$\{?TEST_DIR\}?/([A-Za-z0-9._-]+\.sh)", re.M
)
#: A download when grading: TB1 ran run-tests.sh with the network; the harness's default has none.
_TEST_TIME_INSTALL = re.compile(
    r"\b(?:apt-get\s+install|apt\s+install|pip3?\s+install|uv\s+(?:pip\s+install|add|sync|tool"
    r"\s+install)|curl|wget|npm\s+(?:install|i|ci)|cargo\s+install|go\s+install)\b"
)
_T_BENCH_VAR = re.compile(r"\$\{(T_BENCH_[A-Z_]+)\}")

#: The verifier written for every task: run-tests.sh's exit code becomes the reward.
#: ``{placements}`` is where the TB1 client's bind mounts of verifier files are recreated.
TEST_SH_TEMPLATE = """#!/bin/bash
# Converted from a Terminal-Bench 1 task: run-tests.sh's exit code is the verdict.
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
export TEST_DIR="$here"
verifier_dir="${HARNESS_VERIFIER_DIR:-/logs/verifier}"
mkdir -p "$verifier_dir"
{placements}bash "$here/run-tests.sh"
code=$?
reward=0
if [ "$code" -eq 0 ]; then reward=1; fi
echo "$reward" > "$verifier_dir/reward.txt"
exit "$code"
"""
#: The verifier of a task whose compose file bind-mounts none of the verifier's files.
TEST_SH = TEST_SH_TEMPLATE.replace("{placements}", "")
#: A shell function test.sh uses to put a verifier file where TB1's compose mounted it.
_PLACE_FN = """# TB1 bind-mounted these task files into the client: put there for grading only.
place() {
  [ "${2%/}" = "$1" ] && return 0  # mounted where the tests are anyway
  rm -rf "$2" && mkdir -p "$(dirname "$2")" && cp -a "$1" "$2"
}
"""
#: The task files that are the verifier's: mounted at grading time, never baked in.
_VERIFIER_FILES = {"tests", _RUN_TESTS}


@dataclass
class MigratedTask:
    """One task's conversion.

    Attributes:
        source: The TB1 task dir.
        dest: The Harbor task dir written (None when it failed).
        notes: What could not be mapped, or was mapped with a change of meaning.
        error: Why it failed, if it did.
    """

    source: Path
    dest: Path | None
    notes: list[str] = field(default_factory=list)
    error: str | None = None


def is_tb1_task_dir(path: Path) -> bool:
    """Whether ``path`` is a Terminal-Bench 1 task dir (``task.yaml``, no ``task.toml``)."""
    path = Path(path)
    return (path / TB1_TASK_YAML).is_file() and not (path / "task.toml").is_file()


def find_tb1_tasks(sources: Sequence[Path]) -> tuple[list[Path], list[str]]:
    """The TB1 task dirs of each source (a task dir, or a dir of task dirs).

    A source is taken as given; a symlink among a source's children is not followed (a
    task set's entry may point anywhere on the host): it is a problem, named.

    Returns:
        The task dirs, and a problem for each source that holds none or a symlinked one.
    """
    found: list[Path] = []
    problems: list[str] = []
    for source in map(Path, sources):
        if is_tb1_task_dir(source):
            found.append(source)
            continue
        children = sorted(c for c in source.iterdir() if c.is_dir()) if source.is_dir() else []
        links = [c for c in children if c.is_symlink() and is_tb1_task_dir(c)]
        problems += [
            f"{link}: a symlink to a task dir, not followed (it may point anywhere on the "
            "host): migrate the dir it names itself"
            for link in links
        ]
        tasks = [c for c in children if not c.is_symlink() and is_tb1_task_dir(c)]
        if not tasks and not links:
            problems.append(f"{source}: no Terminal-Bench 1 task dir (a dir holding task.yaml)")
        found.extend(tasks)
    return found, problems


def migrate_tasks(
    sources: Sequence[Path], dest: Path, *, allow_internet: bool = False
) -> tuple[list[MigratedTask], list[str]]:
    """Convert every TB1 task of ``sources`` into ``dest/<task name>``.

    Args:
        sources: TB1 task dirs or dirs of them.
        dest: Where the Harbor task dirs go (created).
        allow_internet: Write ``[environment] allow_internet = true`` (TB1 tasks ran with
            the network; the harness's default is no network).

    Returns:
        One result per task found (failures included), and the sources that hold none.
    """
    tasks, problems = find_tb1_tasks(sources)
    dest.mkdir(parents=True, exist_ok=True)
    results = []
    for source in tasks:
        target = dest / source.name
        result = MigratedTask(source, target)
        try:
            migrate_task(source, target, result.notes, allow_internet=allow_internet)
        except (MigrationError, OSError) as exc:
            result.dest, result.error = None, str(exc).splitlines()[0]
        results.append(result)
    return results, problems


def migrate_task(
    source: Path, target: Path, notes: list[str], *, allow_internet: bool = False
) -> None:
    """Convert one TB1 task dir into the Harbor task dir ``target``; append notes.

    The task is read from a private snapshot and written into a private dir beside
    ``target``, renamed to ``target`` when whole (see the module doc); on any failure
    nothing is left at ``target``.

    Raises:
        MigrationError: It cannot be converted (no instruction, no run-tests.sh, a
            symlink leaving the task, a target that exists...).
    """
    target = Path(target)
    if os.path.lexists(target):
        raise MigrationError(f"{target} exists already (migrate into an empty dir)")
    target.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{target.name}.migrating-", dir=target.parent))
    try:
        snapshot = work / "source"
        snapshot.mkdir(mode=0o700)
        snapshot_task(source, snapshot)
        built = work / "task"
        built.mkdir(mode=0o755)
        _convert(snapshot, NewTree(built), source.name, notes, allow_internet)
        if os.path.lexists(target):
            raise MigrationError(f"{target} exists already (migrate into an empty dir)")
        os.rename(built, target)  # a dir made meanwhile at target: ENOTEMPTY/ENOTDIR
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _convert(source: Path, out: NewTree, name: str, notes: list[str], allow_internet: bool) -> None:
    """Convert the snapshot ``source`` of TB1 task ``name`` into ``out``."""
    meta = _read_task_yaml(source)
    compose = _read_compose(source)
    service = _main_service(compose)
    context = _build_context(service)
    missing = []
    if not (source / _RUN_TESTS).is_file():
        missing.append(
            f"no {_RUN_TESTS} (the TB1 verifier: write one that runs tests/ and exits 0 on a pass)"
        )
    if not (source / context / "Dockerfile").is_file():
        missing.append(f"no Dockerfile in its build context {context!r} (the environment)")
    if missing:
        raise MigrationError("; ".join(missing))
    out.mkdir("environment")
    handled = set(_HANDLED)
    if context == ".":
        handled.add("Dockerfile")
        out.copy_file(source, "Dockerfile", "environment/Dockerfile")
    else:
        handled.add(context.split("/")[0])
        out.copy_tree(source, context, "environment")
    dockerfile = out.path("environment/Dockerfile")
    if not dockerfile.is_file() or dockerfile.is_symlink():
        raise MigrationError(f"no Dockerfile in its build context {context!r}")
    text = dockerfile.read_text(errors="replace")
    _copy_rest(source, out, handled, text)
    mounts = _task_mounts(service, source, notes)
    out.write(
        "environment/Dockerfile", _append_to_dockerfile(text, service, notes, mounts.image_lines)
    )
    if compose and not _collapsible(compose, service):
        if len(compose.get("services") or {}) == 1:
            _note_dropped(service, notes)  # no sidecar: the Dockerfile is the environment
        else:
            _write_compose(compose, service, source, out, notes)
    if (source / "tests").is_dir():
        out.copy_tree(source, "tests", "tests")
    out.mkdir("tests")
    if out.exists("tests/test.sh"):
        notes.append("tests/test.sh of the TB1 task was replaced by the converted verifier")
    out.copy_file(source, _RUN_TESTS, f"tests/{_RUN_TESTS}")
    script = (source / _RUN_TESTS).read_text(errors="replace")
    _note_missing_helpers(script, out, notes)
    if not allow_internet and _TEST_TIME_INSTALL.search(script):
        notes.append(
            "run-tests.sh installs packages when grading (apt-get, pip, uv, curl...): with no "
            "network its verifier cannot pass; migrate with --allow-internet, or bake them "
            "into the Dockerfile"
        )
    placements = "".join(
        f'place "$here"{shlex.quote(sub) if sub else ""} {shlex.quote(dst)}\n'
        for sub, dst in mounts.verifier
    )
    if placements:
        placements = _PLACE_FN + placements
    out.write("tests/test.sh", TEST_SH_TEMPLATE.replace("{placements}", placements), 0o755)
    _write_solution(source, out, notes)
    instruction = str(meta["instruction"])
    out.write("instruction.md", instruction if instruction.endswith("\n") else instruction + "\n")
    out.write("task.toml", _task_toml(meta, name, notes, allow_internet))


def _read_task_yaml(source: Path) -> dict[str, Any]:
    data = load_yaml(source / TB1_TASK_YAML, TB1_TASK_YAML)
    if not isinstance(data, dict):
        what = "empty" if data is None else f"a {type(data).__name__}, not a mapping"
        raise MigrationError(f"task.yaml is {what}")
    if "instruction" not in data:
        # The first TB1 format: descriptions: [{key: base, description: ...}]
        descriptions = data.get("descriptions") or []
        for item in descriptions if isinstance(descriptions, list) else []:
            if isinstance(item, dict) and item.get("key") == "base":
                data["instruction"] = item.get("description", "")
    if not isinstance(data.get("instruction"), str) or not data["instruction"].strip():
        raise MigrationError(
            "task.yaml has no instruction (TB1 reads 'instruction', or 'descriptions' with "
            f"key 'base'; it has {sorted(map(str, data))})"
        )
    return data


def _read_compose(source: Path) -> dict[str, Any]:
    path = source / _COMPOSE
    if not path.is_file():
        return {}
    data = load_yaml(path, _COMPOSE)
    if not isinstance(data, dict) or not isinstance(data.get("services"), dict):
        raise MigrationError(f"{_COMPOSE} has no services")
    return data


def _main_service(compose: dict[str, Any]) -> dict[str, Any]:
    services = compose.get("services") or {}
    if not services:
        return {}
    name = "client" if "client" in services else next(iter(services))
    service = services[name]
    return service if isinstance(service, dict) else {}


def _main_name(compose: dict[str, Any]) -> str:
    services = compose.get("services") or {}
    return "client" if "client" in services else next(iter(services), "client")


def _build_context(service: dict[str, Any]) -> str:
    build = service.get("build", ".")
    context = build.get("context", ".") if isinstance(build, dict) else build
    clean = str(context).strip().removeprefix("./").rstrip("/") or "."
    if clean.startswith("/") or ".." in clean.split("/"):
        raise MigrationError(f"build context {context!r} leaves the task dir")
    return clean


def _copy_rest(source: Path, out: NewTree, handled: set[str], dockerfile: str) -> None:
    """Every other file of the task is part of the image's build context."""
    names = [item.name for item in sorted(source.iterdir()) if item.name not in handled]
    # A Dockerfile that bakes the tests, run-tests.sh or the solution in still finds them.
    for name in [*names, *sorted(_baked_in(dockerfile))]:
        if (source / name).is_dir():
            out.copy_tree(source, name, f"environment/{name}")
        elif (source / name).is_file():
            out.copy_file(source, name, f"environment/{name}")


def _baked_in(dockerfile: str) -> set[str]:
    """The verifier and solution files a ``COPY``/``ADD`` of the Dockerfile takes.

    A source is relative to the build context even with a leading ``/``
    (``COPY /tests/pipeline/ /app/``), and options (``--chown=...``) come first.
    """
    found: set[str] = set()
    text = dockerfile.replace("\\\n", " ")
    for match in re.finditer(r"^\s*(?:COPY|ADD)\s+(.+)$", text, re.M | re.I):
        words = [w for w in match.group(1).split() if not w.startswith("--")]
        if any(w.startswith("--from") for w in match.group(1).split()):
            continue
        for word in words[:-1]:
            head = word.strip('[",]').lstrip("./").split("/")[0]
            if head in (*_VERIFIER_FILES, "solution.sh"):
                found.add(head)
    return found


def _env_items(service: dict[str, Any]) -> list[tuple[str, str | None]]:
    env = service.get("environment") or []
    items: list[tuple[str, str | None]] = []
    if isinstance(env, dict):
        items = [(str(k), None if v is None else str(v)) for k, v in env.items()]
    else:
        for entry in env:
            name, eq, value = str(entry).partition("=")
            items.append((name, value if eq else None))
    return [(k, v) for k, v in items if f"{k}={v}" not in _DEFAULT_ENV]


def _translate(text: str, notes: list[str]) -> str:
    def swap(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in _T_BENCH:
            return _T_BENCH[name]
        notes.append(f"${{{name}}} has no equivalent; left as it is")
        return match.group(0)

    return _T_BENCH_VAR.sub(swap, text)


def _append_to_dockerfile(
    text: str, service: dict[str, Any], notes: list[str], extra: list[str]
) -> str:
    """The Dockerfile ``text`` with the client service's settings and ``extra`` appended."""
    lines = ["", "# Mapped from the Terminal-Bench 1 docker-compose.yaml", "ENV TEST_DIR=/tests"]
    for name, value in _env_items(service):
        if value is None:
            notes.append(f"compose environment {name} (taken from the host) was left out")
            continue
        lines.append(f"ENV {name}={_translate(value, notes)}")
    workdir = service.get("working_dir")
    if isinstance(workdir, str) and "${" not in workdir:
        lines.append(f"WORKDIR {workdir}")
    expose = service.get("expose") or []
    lines += [f"EXPOSE {port}" for port in (expose if isinstance(expose, list) else [expose])]
    lines += extra
    return text + ("" if text.endswith("\n") else "\n") + "\n".join(lines) + "\n"


@dataclass
class _Mounts:
    """The client's bind mounts of the task's own files, mapped.

    Attributes:
        image_lines: Dockerfile lines that copy (or create) the mounted files in the image.
        verifier: ``(path under tests/ or "", mount point)`` pairs that test.sh places.
    """

    image_lines: list[str] = field(default_factory=list)
    verifier: list[tuple[str, str]] = field(default_factory=list)


def _bind_source(volume: object) -> tuple[str, str] | None:
    """``(source inside the task dir, target)`` of a bind mount of the task's files, else None.

    Compose resolves a relative source against the compose file's dir, the task dir; a
    named volume, a host path or a ``${...}`` source is not the task's.
    """
    if isinstance(volume, dict):
        if volume.get("type", "bind") != "bind":
            return None
        src, dst = str(volume.get("source", "")), str(volume.get("target", ""))
    else:
        parts = str(volume).split(":")
        if len(parts) < 2:
            return None
        src, dst = parts[0], parts[1]
    if not (src == "." or src.startswith("./")) or "$" in src or not dst.startswith("/"):
        return None
    clean = src.removeprefix("./").rstrip("/") or "."
    if ".." in clean.split("/"):
        return None
    return clean, dst


def _foreign_volumes(service: dict[str, Any]) -> list[object]:
    """The client's volumes that are neither TB1's logs mounts nor the task's own files."""
    return [
        v
        for v in service.get("volumes") or []
        if str(v) not in _DEFAULT_VOLUMES and _bind_source(v) is None
    ]


def _task_mounts(service: dict[str, Any], source: Path, notes: list[str]) -> _Mounts:
    """Map the client's bind mounts of the task's files (TB1 ran ``compose up`` in it)."""
    mounts = _Mounts()
    for volume in service.get("volumes") or []:
        bound = _bind_source(volume)
        if bound is None:
            continue
        src, dst = bound
        head, _, rest = src.partition("/")
        if head in _VERIFIER_FILES:
            sub = "/" + rest if head == "tests" and rest else ""
            if head == _RUN_TESTS:
                sub = "/" + _RUN_TESTS
            mounts.verifier.append((sub, dst))
            notes.append(
                f"bind mount {src}:{dst} is put in place by tests/test.sh when grading starts "
                "(the agent does not see it)"
            )
        elif src == ".":
            mounts.image_lines.append(f"COPY . {dst}")
            mounts.verifier += [("", f"{dst}/tests"), (f"/{_RUN_TESTS}", f"{dst}/{_RUN_TESTS}")]
            notes.append(
                f"bind mount .:{dst} (the whole task dir) is copied into the image: its build "
                "context, which holds the tests and the solution only if the Dockerfile bakes "
                "them in; tests/ and run-tests.sh are put there by tests/test.sh when grading "
                "starts"
            )
        elif head in ("solution.sh", "solution.yaml"):
            notes.append(f"bind mount {src}:{dst} of the solution was left out")
        elif (source / src).exists():
            mounts.image_lines.append(f"COPY {src} {dst}")
            notes.append(f"bind mount {src}:{dst} is copied into the image (not a live mount)")
        else:
            mounts.image_lines.append(f"RUN mkdir -p {dst}")
            notes.append(f"bind mount {src}:{dst} (absent from the task) is an empty dir")
    return mounts


def _collapsible(compose: dict[str, Any], service: dict[str, Any]) -> bool:
    """Whether the compose file is only TB1's standard single client."""
    if len(compose.get("services") or {}) != 1 or set(compose) - {"services", "version"}:
        return False
    if set(service) - _COLLAPSIBLE:
        return False
    return not _foreign_volumes(service)


def _note_dropped(service: dict[str, Any], notes: list[str]) -> None:
    """Tell what of a lone client service the Dockerfile cannot carry."""
    volumes = _foreign_volumes(service)
    if volumes:
        notes.append(f"the client's volumes {volumes} are not mounted (the harness owns mounts)")
    for key in sorted(set(service) - _COLLAPSIBLE):
        if key == "tmpfs":
            notes.append(
                f"the client's tmpfs {service[key]} is not mounted: a size limit the task may "
                "rely on (the harness has no per-path mount; storage_mb limits the whole disk)"
            )
            continue
        notes.append(f"compose key {key!r} of the client has no equivalent; left out")


def _write_compose(
    compose: dict[str, Any],
    service: dict[str, Any],
    source: Path,
    out: NewTree,
    notes: list[str],
) -> None:
    """``environment/docker-compose.yaml``: the client as ``main``, the rest as sidecars."""
    main_name = _main_name(compose)
    main: dict[str, Any] = {"build": {"context": "."}}
    env = [f"{k}={v}" for k, v in _env_items(service) if v is not None]
    if env:
        main["environment"] = env
    for key, value in service.items():
        if key not in _MAIN_REPLACED | {"environment"}:
            main[key] = value
    volumes = _foreign_volumes(service)
    if volumes:
        notes.append(
            f"the client's volumes {volumes} are not mounted (the harness owns main's mounts)"
        )
    if "deploy" in service:
        notes.append("the client's deploy limits were dropped: set [environment] cpus/memory_mb")
    converted: dict[str, Any] = {
        k: v for k, v in compose.items() if k not in ("services", "version")
    }
    converted["services"] = {"main": main}
    for name, sidecar in (compose.get("services") or {}).items():
        if name == main_name:
            continue
        converted["services"][name] = sidecar
        build = sidecar.get("build") if isinstance(sidecar, dict) else None
        context = _build_context(sidecar) if build is not None else "."
        if context != "." and (source / context).is_dir():
            out.copy_tree(source, context, f"environment/{context}")
    text = _translate(yaml.safe_dump(converted, sort_keys=False), notes)
    # The one check `tasks check` and a trial make: what would reach the host is refused.
    problems = compose_problems(yaml.safe_load(text), out.root)
    if problems:
        raise MigrationError(f"{_COMPOSE} is refused: " + "; ".join(problems))
    out.write(f"environment/{_COMPOSE}", text)
    notes.append("docker-compose.yaml kept as environment/docker-compose.yaml (sidecars)")


def _note_missing_helpers(script: str, out: NewTree, notes: list[str]) -> None:
    """TB1's harness put shared helpers (``setup-uv-pytest.sh``...) into the tests dir."""
    for name in sorted(set(_TEST_DIR_FILE.findall(script))):
        if not out.exists(f"tests/{name}"):
            notes.append(
                f"run-tests.sh uses $TEST_DIR/{name}, which is not in tests/ (Terminal-Bench "
                "1's harness supplied it): copy it into tests/"
            )


def _write_solution(source: Path, out: NewTree, notes: list[str]) -> None:
    if (source / "solution.sh").is_file():
        out.copy_file(source, "solution.sh", "solution/solve.sh", mode=0o755)
    elif (source / "solution.yaml").is_file():
        steps = load_yaml(source / "solution.yaml", "solution.yaml") or []
        commands = [
            str(step["command"])
            for step in (steps if isinstance(steps, list) else [])
            if isinstance(step, dict) and "command" in step
        ]
        if not commands:
            notes.append("solution.yaml holds no command: no solution/solve.sh written")
            return
        body = "\n".join(commands)
        out.write("solution/solve.sh", f"#!/bin/bash\n# From solution.yaml\n{body}\n", 0o755)
        notes.append("solution.yaml's commands were written into solution/solve.sh (one shell)")
    else:
        notes.append("no solution.sh: the oracle agent cannot run this task")


def _task_toml(meta: dict[str, Any], name: str, notes: list[str], allow_internet: bool) -> str:
    metadata = {key: meta[key] for key in _METADATA_KEYS if meta.get(key) is not None}
    data: dict[str, Any] = {"source": f"terminal-bench-1:{name}", "metadata": metadata}
    if "max_agent_timeout_sec" in meta:
        data["agent"] = {"timeout_sec": _seconds(meta, "max_agent_timeout_sec")}
    if "max_test_timeout_sec" in meta:
        data["verifier"] = {"timeout_sec": _seconds(meta, "max_test_timeout_sec")}
    if allow_internet:
        data["environment"] = {"allow_internet": True}
    parser = meta.get("parser_name")
    if parser not in (None, "pytest"):
        notes.append(f"parser_name {parser!r}: the verdict is run-tests.sh's exit code instead")
    known = {"instruction", "descriptions", "parser_name", *_METADATA_KEYS, *_SILENT_KEYS}
    known |= {"max_agent_timeout_sec", "max_test_timeout_sec"}
    for key in sorted(set(meta) - known):
        if isinstance(meta[key], str | int | float | bool | list) and key not in metadata:
            metadata[key] = meta[key]
            notes.append(f"task.yaml key {key!r} has no equivalent; kept in [metadata]")
        else:
            notes.append(f"task.yaml key {key!r} has no equivalent; left out")
    try:
        return to_toml(data)
    except (TypeError, ValueError) as exc:
        raise MigrationError(
            f"task.yaml holds a value task.toml cannot hold ({exc}): fix it in task.yaml"
        ) from None


def _seconds(meta: dict[str, Any], key: str) -> float:
    value = meta[key]
    try:
        if isinstance(value, bool):
            raise ValueError(key)
        return float(value)
    except (TypeError, ValueError):
        raise MigrationError(f"task.yaml {key} is {value!r}, not a number of seconds") from None


__all__ = [
    "TB1_TASK_YAML",
    "TEST_SH",
    "MigratedTask",
    "MigrationError",
    "find_tb1_tasks",
    "is_tb1_task_dir",
    "migrate_task",
    "migrate_tasks",
]
