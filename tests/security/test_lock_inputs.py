"""A hostile ``datasets.lock.json``, ``--repo`` spec or registry never reaches ``git`` as an option.

A run dir is someone else's: ``harness run --from-lock RUN_DIR`` and ``harness run --resume
RUN_DIR`` read its lock. Each attack plants one bad field into a real dataset run's lock
(made from a real git repository) and runs the real CLI: it must exit 2 naming the field and
the file, before any ``git`` runs (a ``git`` on PATH records every command line it is given,
then runs the real one), with the canary never created and nothing written. A clean rerun
shows that every command line the harness builds puts ``--end-of-options`` before its values.
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import shutil
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from support.cli import harness

REAL_GIT = shutil.which("git")
END = "--end-of-options"
#: A field separator and a record separator no argument holds.
_FS, _RS = "\x1f", "\x1e"


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(
        ["git", "-c", "user.email=t@example.invalid", "-c", "user.name=t", *args],
        cwd=repo, capture_output=True, text=True, check=True,
    )  # fmt: skip
    return done.stdout.strip()


@dataclass
class Source:
    """A real dataset run: its repository, commit, registry and run dir."""

    repo: Path
    commit: str
    registry: Path
    run_dir: Path


@dataclass
class Tools:
    """A ``git`` on PATH that records its command lines, and a canary path."""

    env: dict[str, str]
    log: Path
    canary: Path
    cache: Path

    def argvs(self) -> list[list[str]]:
        """Every command line ``git`` was run with (the harness's and git's own children)."""
        if not self.log.exists():
            return []
        text = self.log.read_text()
        return [rec.split(_FS)[:-1] for rec in text.split(_RS) if rec]

    def harness_argvs(self) -> list[list[str]]:
        """The command lines the harness built (git's own children carry no ``-c`` first)."""
        return [a for a in self.argvs() if a[:2] == ["-c", "protocol.allow=never"]]


def _make_repo(path: Path, prefix: str) -> str:
    path.mkdir(parents=True)
    _git(path, "init", "-q", "-b", "main")
    for name in ("alpha", "beta"):
        task = path / "tasks" / name
        (task / "tests").mkdir(parents=True)
        (task / "task.toml").write_text(
            f'[task]\nname = "{prefix}/{name}"\n\n[agent]\ntimeout_sec = 30\n'
        )
        (task / "instruction.md").write_text(f"Task {name}.\n")
        test_sh = task / "tests" / "test.sh"
        test_sh.write_text('#!/bin/bash\necho 1 > "$HARNESS_VERIFIER_DIR/reward.txt"\n')
        test_sh.chmod(0o755)
    _git(path, "add", "-A")
    _git(path, "commit", "-qm", "tasks")
    return _git(path, "rev-parse", "HEAD")


def _run_args(out: Path) -> list[str | Path]:
    return ["--agent", "nop", "--sandbox", "local", "-o", out, "--display", "none"]


@pytest.fixture(scope="module")
def source(tmp_path_factory: pytest.TempPathFactory) -> Source:
    """One real dataset run (local sandbox, a pinned registry over a real repository)."""
    top = tmp_path_factory.mktemp("lock-source")
    prefix = f"sec-lock-{secrets.token_hex(4)}"
    repo = top / "upstream"
    commit = _make_repo(repo, prefix)
    registry = top / "registry.json"
    tasks = [
        {"name": n, "git_url": str(repo), "git_commit_id": commit, "path": f"tasks/{n}"}
        for n in ("alpha", "beta")
    ]
    registry.write_text(json.dumps([{"name": prefix, "version": "1.0", "tasks": tasks}]))
    env = {"HARNESS_CACHE_DIR": str(top / "cache")}
    done = harness(
        "run", "-d", f"{prefix}@1.0", "--registry-path", registry, *_run_args(top / "runs"),
        env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    (run_dir,) = (top / "runs").iterdir()
    assert (run_dir / "datasets.lock.json").is_file()
    return Source(repo, commit, registry, run_dir)


@pytest.fixture
def tools(tmp_path: Path) -> Iterator[Tools]:
    """A recording ``git`` first on PATH, a fresh cache, a canary path never created."""
    if REAL_GIT is None:
        from support.docker import prerequisite_missing

        prerequisite_missing("the git client is not installed")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    log = tmp_path / "git-argv.log"
    wrapper = bin_dir / "git"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"{{ for a in \"$@\"; do printf '%s\\037' \"$a\"; done; printf '\\036'; }} >> '{log}'\n"
        f'exec {REAL_GIT} "$@"\n'
    )
    wrapper.chmod(0o755)
    canary = Path(f"/tmp/hcl-{secrets.token_hex(6)}")
    cache = tmp_path / "cache"
    env = {"PATH": f"{bin_dir}:{os.environ['PATH']}", "HARNESS_CACHE_DIR": str(cache)}
    yield Tools(env, log, canary, cache)
    canary.unlink(missing_ok=True)


def _tree(top: Path) -> dict[str, str]:
    """Every entry under ``top`` and a digest of what it holds (links by target)."""
    found = {}
    for path in sorted(top.rglob("*")):
        rel = str(path.relative_to(top))
        if path.is_symlink():
            found[rel] = "->" + os.readlink(path)
        elif path.is_file():
            found[rel] = hashlib.sha256(path.read_bytes()).hexdigest()
        else:
            found[rel] = "dir"
    return found


def _forged(source: Source, where: Path, field: str, value: str) -> Path:
    """A copy of the source run dir whose lock's first task has ``field`` = ``value``."""
    run_dir = where / source.run_dir.name
    shutil.copytree(source.run_dir, run_dir, symlinks=True)
    lock_file = run_dir / "datasets.lock.json"
    lock = json.loads(lock_file.read_text())
    lock["tasks"][0][field] = value
    lock_file.write_text(json.dumps(lock, indent=2))
    return run_dir


#: (field, value with {canary}): each would reach git, or the host's paths, unchecked.
LOCK_ATTACKS = [
    ("commit", "--upload-pack=touch {canary}; false"),
    ("commit", "HEAD"),
    ("commit", "ABCDEF0123456789ABCDEF0123456789ABCDEF01"),
    ("path", "tasks/../../outside"),
    ("path", "/etc"),
    ("path", "--output={canary}"),
    ("path", "tasks/alpha\nx"),
    ("git_url", "ext::sh -c touch% {canary}"),
    ("git_url", "ssh://-oProxyCommand=touch% {canary}/r"),
    ("git_url", "-oProxyCommand=touch% {canary}:r"),
    ("requested_ref", "--upload-pack=touch {canary}"),
    ("content_hash", ""),
]


@pytest.mark.root
@pytest.mark.parametrize("how", ["from-lock", "resume"])
@pytest.mark.parametrize(
    ("field", "value"), LOCK_ATTACKS, ids=[f"{f}-{i}" for i, (f, _) in enumerate(LOCK_ATTACKS)]
)
def test_a_forged_lock_is_refused_before_git_runs(
    source: Source, tools: Tools, tmp_path: Path, how: str, field: str, value: str
) -> None:
    run_dir = _forged(source, tmp_path / "forged", field, value.format(canary=tools.canary))
    before = _tree(run_dir)
    out = tmp_path / "out"
    if how == "from-lock":
        done = harness("run", "--from-lock", run_dir, *_run_args(out), env=tools.env)
    else:
        done = harness("run", "--resume", run_dir, "--display", "none", env=tools.env)
    assert not tools.canary.exists(), "the lock ran a command on the host"
    assert tools.argvs() == [], f"git ran with a forged lock: {tools.argvs()}"
    assert done.returncode == 2, done.stderr
    assert f"tasks[0].{field}" in done.stderr and "datasets.lock.json" in done.stderr, done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    assert not out.exists() or not any(out.iterdir())
    assert not tools.cache.exists() or not any((tools.cache / "tasks").glob("*"))
    assert _tree(run_dir) == before, "the refused resume wrote into the run dir"


#: --repo specs whose URL or ref would reach git.
REPO_ATTACKS = [
    "ext::sh -c touch% {canary}",
    "ssh://-oProxyCommand=touch% {canary}/r",
    "{repo}@-q",
    "{repo}@HEAD..main",
]


@pytest.mark.root
@pytest.mark.parametrize("spec", REPO_ATTACKS)
def test_a_hostile_repo_spec_is_refused_before_git_runs(
    source: Source, tools: Tools, tmp_path: Path, spec: str
) -> None:
    given = spec.format(canary=tools.canary, repo=source.repo)
    out = tmp_path / "out"
    done = harness("run", "--repo", given, *_run_args(out), env=tools.env)
    assert not tools.canary.exists(), "the --repo spec ran a command on the host"
    assert tools.argvs() == [], f"git ran with a hostile --repo: {tools.argvs()}"
    assert done.returncode == 2 and "--repo" in done.stderr, done.stderr
    assert not out.exists() or not any(out.iterdir())


#: Registry task fields that reach git or the host's paths.
REGISTRY_ATTACKS = [
    ("git_commit_id", "--upload-pack=touch {canary}"),
    ("path", "--output={canary}"),
    ("git_url", "ssh://-oProxyCommand=touch% {canary}/r"),
]


@pytest.mark.root
@pytest.mark.parametrize(("field", "value"), REGISTRY_ATTACKS)
def test_a_hostile_registry_entry_is_refused_before_git_runs(
    source: Source, tools: Tools, tmp_path: Path, field: str, value: str
) -> None:
    task = {"name": "x", "git_url": str(source.repo), "git_commit_id": "HEAD", "path": "x"}
    task[field] = value.format(canary=tools.canary)
    registry = tmp_path / "registry.json"
    registry.write_text(json.dumps([{"name": "evil", "version": "1", "tasks": [task]}]))
    out = tmp_path / "out"
    done = harness(
        "run", "-d", "evil@1", "--registry-path", registry, *_run_args(out), env=tools.env
    )
    assert not tools.canary.exists(), "the registry ran a command on the host"
    assert tools.argvs() == [], f"git ran with a hostile registry: {tools.argvs()}"
    assert done.returncode == 2 and f"tasks.0.{field}" in done.stderr, done.stderr


@pytest.mark.root
def test_every_git_command_line_puts_its_values_after_end_of_options(
    source: Source, tools: Tools, tmp_path: Path
) -> None:
    # A clean lock fetched anew (empty cache), and a --repo at a branch: every git call.
    done = harness("run", "--from-lock", source.run_dir, *_run_args(tmp_path / "a"), env=tools.env)
    assert done.returncode == 0, done.stderr
    done = harness(
        "run", "--repo", f"{source.repo}@main", *_run_args(tmp_path / "b"), env=tools.env
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    argvs = tools.harness_argvs()
    subcommands = set()
    for argv in argvs:
        # -c NAME=VALUE pairs, then the subcommand, its options, END, its values.
        at = 0
        while argv[at] == "-c":
            assert "sshcommand" not in argv[at + 1].lower(), argv
            at += 2
        sub = argv[at]
        subcommands.add(sub)
        assert "protocol.allow=never" in argv and "protocol.ext.allow=always" not in argv
        rest = argv[at + 1 :]
        if sub == "init" or (sub == "lfs" and rest[:1] in (["version"], ["pull"])):
            # No value of theirs stands alone: git-lfs takes --include=PATHS as one word.
            assert all(arg.startswith("-") for arg in rest if arg not in ("version", "pull"))
            continue
        assert END in rest, f"git {sub} without {END}: {argv}"
        before = rest[: rest.index(END)]
        # Before END: options, a depth, a verb (remote add, sparse-checkout set).
        assert all(a.startswith("-") or a.isdigit() or a in ("add", "set") for a in before), argv
        carried = " ".join(before)
        assert source.commit not in carried and str(source.repo) not in carried, argv
    assert {"ls-remote", "fetch", "switch", "sparse-checkout", "cat-file"} <= subcommands
    assert "ls-tree" in subcommands and "remote" in subcommands


@pytest.mark.root
def test_git_takes_a_commit_that_slipped_past_the_checks_as_a_value(
    source: Source, tools: Tools, tmp_path: Path
) -> None:
    # Defence in depth: the fetch itself, given an unchecked commit, never runs it.
    from harness.datasets import git
    from harness.datasets.model import DatasetError

    value = f"--upload-pack=touch {tools.canary}; false"
    with pytest.raises(DatasetError):
        git.fetch_commit(str(source.repo), value, tmp_path / "scratch")
    assert not tools.canary.exists(), "git took the commit as an option"
    with pytest.raises(DatasetError):
        git.checkout_paths(tmp_path / "scratch", str(source.repo), value, ["tasks/alpha"])
    assert not tools.canary.exists(), "git took the commit as an option"
