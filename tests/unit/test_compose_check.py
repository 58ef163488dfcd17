"""The compose allowlist on compose's normalised reading of a file (no engine needed).

The trial judges the file a second time as ``docker compose config`` normalised it: compose
names each top-level object ``<project>_<key>`` there, and only that name is accepted.
"""

from __future__ import annotations

from pathlib import Path

from sandbox.docker.compose import RESET, _dump
from sandbox.docker.compose_check import compose_file_problems, compose_problems

REPO = Path(__file__).resolve().parents[2]


def _normalised(volume_name: str) -> dict[str, object]:
    return {
        "name": "harness-t-abc",
        "networks": {"default": {"name": "harness-t-abc_default", "ipam": {}}},
        "services": {
            "main": {"image": "x", "networks": {"default": None}},
            "kv": {
                "image": "x",
                "command": None,
                "entrypoint": None,
                "networks": {"default": None},
                "depends_on": {"db": {"condition": "service_healthy", "required": True}},
                "volumes": [{"type": "volume", "source": "data", "target": "/d", "volume": {}}],
            },
            "db": {"image": "y"},
        },
        "volumes": {"data": {"name": volume_name}},
    }


def test_only_the_projects_own_names_pass_once_normalised(tmp_path: Path) -> None:
    assert (
        compose_problems(_normalised("harness-t-abc_data"), tmp_path, project="harness-t-abc") == []
    )
    (problem,) = compose_problems(
        _normalised("harness-python-2-x"), tmp_path, project="harness-t-abc"
    )
    assert problem.startswith("volumes.data.name = 'harness-python-2-x'")
    # As written, a name is refused whatever it is.
    assert compose_problems(_normalised("harness-t-abc_data"), tmp_path) != []


def test_the_conformance_compose_task_passes() -> None:
    task = REPO / "tests" / "conformance" / "harbor" / "compose-mcp"
    assert compose_file_problems(task / "environment" / "docker-compose.yaml", task) == []


def test_an_alias_bomb_is_judged_without_expanding_it(tmp_path: Path) -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    text = "x-bomb:\n" + "\n".join(f"  {line}" for line in lines)
    text += "\nservices:\n  kv:\n    image: x\n    volumes: *a8\n    labels: *a8\n"
    compose = tmp_path / "environment" / "docker-compose.yaml"
    compose.parent.mkdir()
    compose.write_text(text)
    problems = compose_file_problems(compose, tmp_path)
    assert problems and all(len(problem) < 400 for problem in problems)


def test_the_override_resets_with_compose_tags() -> None:
    text = _dump({"services": {"kv": {"ports": RESET, "labels": {"a": "1"}}}})
    assert text == '{"services": {"kv": {"ports": !reset null, "labels": {"a": "1"}}}}'


def test_a_trial_refuses_the_file_before_compose_reads_it(tmp_path: Path) -> None:
    """A file changed after ``tasks check``: the trial judges it again, first as written.

    ``main``'s ``env_file`` outside the task would be inlined by ``compose config`` into the
    agent's environment; the refusal comes before compose runs (no binary is needed).
    """
    import pytest

    from sandbox.docker.compose import ComposeProject
    from sandbox.errors import PermanentStartError

    secret = tmp_path / "host" / "secret.env"
    secret.parent.mkdir()
    secret.write_text("LEAKED=host-secret\n")
    compose = tmp_path / "task" / "environment" / "docker-compose.yaml"
    compose.parent.mkdir(parents=True)
    compose.write_text(
        f"services:\n  main:\n    env_file: [{secret}]\n  kv:\n    image: x\n"
        "    volumes: [h:/h]\nvolumes:\n  h:\n    driver_opts: {type: none, o: bind, device: /}\n"
    )
    with pytest.raises(PermanentStartError) as refused:
        ComposeProject(
            compose,
            trial_id="t",
            labels={},
            allow_internet=False,
            main_image="img",
            build_timeout_sec=None,
            host_problem="not needed here",
        )
    message = str(refused.value)
    assert "services.main.env_file" in message and "volumes.h.driver_opts" in message
    assert "host-secret" not in message


def test_a_service_named_as_the_harnesss_own_is_refused_even_out_of_every_profile(
    tmp_path: Path,
) -> None:
    """``hxnet-*``/``hxrules-*`` are each sidecar's namespace holder and filter.

    Compose leaves a service of an inactive profile out of its reading of the file, but
    merges its keys into the harness's service of the same name.
    """
    (tmp_path / "environment").mkdir()
    path = tmp_path / "environment" / "docker-compose.yaml"
    path.write_text(
        "services:\n"
        "  kv:\n"
        "    image: x\n"
        "  hxrules-kv:\n"
        "    image: x\n"
        "    entrypoint: ['true']\n"
        "    profiles: ['off']\n"
        "  HXNET-kv:\n"
        "    image: x\n"
    )
    problems = compose_file_problems(path, tmp_path)
    assert [p.split(" ", 1)[0] for p in problems] == ["services.hxrules-kv", "services.HXNET-kv"]
    assert all("rename the service" in p for p in problems), problems
