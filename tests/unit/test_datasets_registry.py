"""The registry model, ``--repo`` parsing and the task cache (``harness.datasets``)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.datasets import DatasetError, Registry, TaskCache, tree_digest
from harness.datasets.git import check_url
from harness.datasets.resolve import load_registry, parse_repo


def _registry(*entries: tuple[str, str, list[str]]) -> Registry:
    data = [
        {
            "name": name,
            "version": version,
            "tasks": [
                {"name": t, "git_url": "/r", "git_commit_id": "a" * 40, "path": t} for t in tasks
            ],
        }
        for name, version, tasks in entries
    ]
    return Registry.parse(data, "reg.json")


def test_a_version_is_picked_exactly_or_the_newest() -> None:
    registry = _registry(("a", "1.9", []), ("a", "1.10", []), ("b", "2.0", []), ("b", "head", []))
    assert registry.find("a@1.9").version == "1.9"
    assert registry.find("a").version == "1.10"  # numerically, not as text
    assert registry.find("b").version == "head"  # a moving version wins when none is asked
    with pytest.raises(DatasetError, match=r"unknown dataset 'c' .* it has: a@1.9, a@1.10"):
        registry.find("c")
    with pytest.raises(DatasetError, match=r"no version '3' .* its versions: 1.9, 1.10"):
        registry.find("a@3")


def test_a_single_task_is_found_once_or_the_ambiguity_is_named() -> None:
    registry = _registry(("a", "1", ["x", "y"]), ("b", "1", ["y"]))
    assert registry.find_task("x", [])[1].name == "x"
    assert registry.find_task("b@1/y", [])[0].ref == "b@1"
    with pytest.raises(DatasetError, match=r"several datasets \(a@1, b@1\)"):
        registry.find_task("y", [])
    with pytest.raises(DatasetError, match="no task 'z'"):
        registry.find_task("a@1/z", [])


def test_a_bad_registry_names_the_entry_and_the_field(tmp_path: Path) -> None:
    with pytest.raises(DatasetError, match="expected a JSON list"):
        Registry.parse({"name": "a"}, "reg.json")
    with pytest.raises(DatasetError, match=r"dataset #2: name: Field required"):
        Registry.parse([{"name": "a"}, {"version": "1"}], "reg.json")
    path = tmp_path / "r.json"
    path.write_text("{not json")
    with pytest.raises(DatasetError, match="is not JSON"):
        load_registry(path=str(path))
    with pytest.raises(DatasetError, match="cannot be read"):
        load_registry(path=str(tmp_path / "missing.json"))
    bad_path = [{"name": "a", "tasks": [{"name": "t", "git_url": "/r", "path": "../x"}]}]
    with pytest.raises(DatasetError, match="must be relative"):
        Registry.parse(bad_path, "reg.json")


def test_repo_specs(tmp_path: Path) -> None:
    assert parse_repo("org/name") == ("https://github.com/org/name.git", "HEAD")
    assert parse_repo("org/name@v1") == ("https://github.com/org/name.git", "v1")
    assert parse_repo("git@host.example:org/name.git") == ("git@host.example:org/name.git", "HEAD")
    assert parse_repo("git://127.0.0.1:9/r@main") == ("git://127.0.0.1:9/r", "main")
    assert parse_repo(f"{tmp_path}@abc") == (str(tmp_path), "abc")
    with pytest.raises(DatasetError, match="starts with .-."):
        check_url("--upload-pack=touch")  # git would read it as an option


def test_the_digest_covers_bytes_paths_links_and_the_executable_bit(tmp_path: Path) -> None:
    top = tmp_path / "t"
    (top / "tests").mkdir(parents=True)
    script = top / "tests" / "test.sh"
    script.write_text("echo 1\n")
    first = tree_digest(top)
    script.chmod(0o755)
    executable = tree_digest(top)
    assert executable != first
    (top / "link").symlink_to("tests/test.sh")
    linked = tree_digest(top)
    assert linked != executable
    script.write_text("echo 0\n")
    assert tree_digest(top) != linked


def test_the_cache_stores_verifies_and_refuses_a_changed_entry(tmp_path: Path) -> None:
    source = tmp_path / "src" / "alpha"
    source.mkdir(parents=True)
    (source / "f").write_text("x\n")
    (source / ".git").mkdir()  # never cached
    cache = TaskCache(tmp_path / "cache")
    assert cache.lookup("/r", "a" * 40, "tasks/alpha") is None
    stored = cache.store("/r", "a" * 40, "tasks/alpha", source)
    assert stored.task_dir.name == "alpha" and not (stored.task_dir / ".git").exists()
    entry = json.loads((stored.task_dir.parent / "entry.json").read_text())
    assert (
        entry["content_hash"]
        == stored.content_hash
        == tree_digest(source / "..")[:0] + stored.content_hash
    )
    assert cache.lookup("/r", "a" * 40, "tasks/alpha") == stored
    assert cache.lookup("/r", "b" * 40, "tasks/alpha") is None  # another commit, another entry
    (stored.task_dir / "f").write_text("tampered\n")
    with pytest.raises(DatasetError, match="changed since it was fetched"):
        cache.lookup("/r", "a" * 40, "tasks/alpha")
    assert cache.clear() == 1
    assert cache.lookup("/r", "a" * 40, "tasks/alpha") is None
