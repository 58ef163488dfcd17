"""Harbor's task format beyond the basics: steps, separate verifiers, artifacts,
healthchecks, MCP servers, sizes, keys not implemented, env templates, --skip-invalid."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.errors import UsageError
from harness.tasks import TaskConfig, TaskSetError, check_tasks, load_task
from harness.tasks.env_templates import EnvTemplateError, resolve_env, resolve_task_env
from harness.tasks.runnable import load_runnable_tasks, resolve_tasks_env
from sandbox.credentials import CredentialStore


def write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    return root


MULTI = """\
multi_step_reward_strategy = "final"

[verifier]
env = { SHARED = "yes" }

[[steps]]
name = "one"
min_reward = 0.5
artifacts = ["/app/a.txt"]

[[steps]]
name = "two"
agent = { timeout_sec = 7, user = "bob" }
verifier = { timeout_sec = 9, env = { STEP = "two" } }
"""


def multi_step(tmp_path: Path, **extra: str) -> Path:
    files = {
        "task.toml": MULTI,
        "tests/test.sh": "shared\n",
        "steps/one/instruction.md": "first\n",
        "steps/one/tests/test.sh": "one\n",
        "steps/one/solution/solve.sh": "s1\n",
        "steps/one/workdir/setup.sh": "setup\n",
        "steps/two/instruction.md": "second\n",
        "steps/two/solution/solve.sh": "s2\n",
    }
    files.update(extra)
    return write(tmp_path / "ms", files)


def problems_of(path: Path) -> list[str]:
    _tasks, problems = check_tasks([path])
    return [str(problem) for problem in problems]


# -- multi-step -------------------------------------------------------------------------


def test_multi_step_task_loads_without_a_top_level_instruction(tmp_path: Path) -> None:
    task = load_task(multi_step(tmp_path))
    assert [step.name for step in task.steps] == ["one", "two"]
    one, two = task.views()
    assert one.instruction == "first\n" and two.instruction == "second\n"
    assert one.solve_script == task.path / "steps/one/solution/solve.sh"
    assert one.step is not None and one.step.setup_script is not None
    assert [d.name for d in one.test_dirs] == ["tests", "tests"]  # shared, then the step's
    assert two.test_dirs == [task.path / "tests"]
    assert two.agent_timeout_sec == 7 and one.agent_timeout_sec == 600
    assert two.agent_user == "bob" and two.verifier_timeout_sec == 9
    assert two.verifier_env == {"SHARED": "yes", "STEP": "two"}
    assert [a.source for a in one.artifacts] == ["/app/a.txt"] and two.artifacts == []
    assert task.config.multi_step_reward_strategy == "final"


def test_missing_step_dir_and_instruction_are_named(tmp_path: Path) -> None:
    root = multi_step(tmp_path)
    (root / "steps/two/instruction.md").unlink()
    problems = problems_of(root)
    assert any("steps/two" in p and "instruction.md" in p for p in problems), problems
    (root / "steps/one/instruction.md").unlink()
    import shutil

    shutil.rmtree(root / "steps/two")
    problems = problems_of(root)
    assert any("missing steps/two/ (step 'two')" in p for p in problems), problems


def test_a_step_without_any_test_script_is_refused(tmp_path: Path) -> None:
    root = multi_step(tmp_path)
    (root / "tests/test.sh").unlink()
    problems = problems_of(root)
    assert problems == [f"{root}: missing steps/two/tests/test.sh or the shared tests/test.sh"]


def test_bad_step_entries(tmp_path: Path) -> None:
    twice = MULTI.replace('name = "two"', 'name = "one"')
    assert any(
        "two steps have the same name" in p
        for p in problems_of(multi_step(tmp_path, **{"task.toml": twice}))
    )
    bad = MULTI.replace('name = "two"', 'name = "../up"')
    assert any("steps.1.name" in p for p in problems_of(write(tmp_path / "b", {"task.toml": bad})))
    empty = "steps = []\n"
    assert any("steps" in p for p in problems_of(write(tmp_path / "e", {"task.toml": empty})))
    strategy = 'multi_step_reward_strategy = "median"\n' + MULTI.split("\n", 1)[1]
    assert any(
        "multi_step_reward_strategy" in p
        for p in problems_of(multi_step(tmp_path / "s", **{"task.toml": strategy}))
    )


def test_min_reward_rules() -> None:
    config = TaskConfig.model_validate(
        {"steps": [{"name": "a", "min_reward": 1}, {"name": "b", "min_reward": {"x": 0.5}}]}
    )
    assert config.steps is not None
    a, b = config.steps
    assert a.min_reward_failure({"reward": 1.0}) is None
    assert a.min_reward_failure({"reward": 0.5}) == "reward = 0.5, below min_reward 1"
    assert a.min_reward_failure(None) == "reward = missing, below min_reward 1"
    assert b.min_reward_failure({"x": 0.7}) is None
    assert b.min_reward_failure({"reward": 1.0}) == "x = missing, below min_reward 0.5"


# -- separate verifier -------------------------------------------------------------------


def test_separate_verifier_needs_a_dockerfile_in_tests(tmp_path: Path) -> None:
    toml = '[verifier]\nenvironment_mode = "separate"\n'
    root = write(tmp_path / "t", {"task.toml": toml, "instruction.md": "x\n"})
    assert problems_of(root) == [
        f"{root}: missing tests/Dockerfile (a separate verifier's image is built from tests/ "
        "and holds /tests/test.sh)"
    ]
    write(root, {"tests/Dockerfile": "FROM scratch\n"})
    task = load_task(root)
    assert task.verifier_mode == "separate" and task.verifier_context == root / "tests"


def test_verifier_environment_implies_separate_and_conflicts_with_shared(tmp_path: Path) -> None:
    config = TaskConfig.model_validate({"verifier": {"environment": {"cpus": 2}}})
    assert config.verifier_mode() == "separate"
    assert config.verifier_environment().cpus == 2
    toml = '[verifier]\nenvironment_mode = "shared"\n[verifier.environment]\ncpus = 2\n'
    root = write(tmp_path / "t", {"task.toml": toml, "instruction.md": "x\n", "tests/test.sh": ""})
    assert any("conflicts with [verifier.environment]" in p for p in problems_of(root))


# -- environment keys ----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("table", "field", "needle"),
    [
        ('[environment]\nmemory = "lots"\n', "environment.memory", "expected a size"),
        ('[environment]\nstorage = "10"\n', "environment.storage", "expected a size"),
        ('[environment]\nos = "macos"\n', "environment.os", "linux"),
        ("[environment]\ngpus = -1\n", "environment.gpus", "greater than or equal to 0"),
        (
            "[environment.healthcheck]\ninterval_sec = 1\n",
            "environment.healthcheck.command",
            "required",
        ),
        (
            '[environment.healthcheck]\ncommand = "true"\nretries = 0\n',
            "environment.healthcheck.retries",
            "1",
        ),
        (
            '[[environment.mcp_servers]]\nname = "m"\ntransport = "sse"\n',
            "environment.mcp_servers.0",
            "'url' is required",
        ),
        (
            '[[environment.mcp_servers]]\nname = "m"\ntransport = "stdio"\n',
            "environment.mcp_servers.0",
            "'command' is required",
        ),
        (
            '[[environment.mcp_servers]]\nname = "m"\ntransport = "carrier-pigeon"\nurl = "x"\n',
            "environment.mcp_servers.0.transport",
            "sse",
        ),
        ('artifacts = ["relative/path"]\n', "artifacts.0.source", "pattern"),
        (
            'artifacts = [{ source = "/a", destination = "../out" }]\n',
            "artifacts.0.destination",
            "without '..'",
        ),
    ],
)
def test_bad_environment_values_name_their_field(
    tmp_path: Path, table: str, field: str, needle: str
) -> None:
    root = write(tmp_path / "t", {"task.toml": table, "instruction.md": "x\n", "tests/test.sh": ""})
    problems = problems_of(root)
    assert any(f": {field}: " in p and needle in p for p in problems), problems


def test_duplicate_mcp_server_names(tmp_path: Path) -> None:
    server = '[[environment.mcp_servers]]\nname = "m"\nurl = "http://m:1/mcp"\n'
    root = write(
        tmp_path / "t", {"task.toml": server * 2, "instruction.md": "x\n", "tests/test.sh": ""}
    )
    assert any("two servers have the same name" in p for p in problems_of(root))


def test_legacy_sizes_and_version_map_onto_the_model() -> None:
    config = TaskConfig.model_validate(
        {"version": "1.0", "environment": {"memory": "2G", "storage": "512M", "os": "Linux"}}
    )
    assert config.schema_version == "1.0"
    assert (config.environment.memory_mb, config.environment.storage_mb) == (2048, 512)
    assert config.environment.os == "linux"
    explicit = TaskConfig.model_validate({"environment": {"memory": "2G", "memory_mb": 100}})
    assert explicit.environment.memory_mb == 100


def test_artifacts_as_strings_and_tables() -> None:
    config = TaskConfig.model_validate(
        {
            "artifacts": [
                "/app/out/",
                {"source": "/logs", "destination": "l/x", "exclude": ["*.tmp"]},
            ]
        }
    )
    first, second = config.artifacts
    assert (first.source, first.target) == ("/app/out/", "out")
    assert (second.target, second.exclude) == ("l/x", ["*.tmp"])


def test_hash_of_a_task_without_new_keys_is_unchanged() -> None:
    # The canonical JSON of an empty task.toml, exactly as the first release wrote it.
    assert TaskConfig().normalized_json() == (
        '{"agent":{"timeout_sec":600.0,"user":null},"environment":{"allow_internet":false,'
        '"build_timeout_sec":600.0,"cpus":1.0,"docker_image":null,"env":{},"memory_mb":2048,'
        '"storage_mb":null,"workdir":null},"metadata":{},"schema_version":null,'
        '"solution":{"env":{}},"task":{"description":null,"name":null},'
        '"verifier":{"env":{},"timeout_sec":600.0,"user":null}}'
    )


# -- unknown and unsupported keys --------------------------------------------------------------


def test_unknown_keys_are_not_problems_but_unsupported_ones_are(tmp_path: Path) -> None:
    toml = "[environment]\nfancy = 1\n[[verifier.collect]]\nx = 1\n"
    root = write(tmp_path / "t", {"task.toml": toml, "instruction.md": "x\n", "tests/test.sh": ""})
    tasks, problems = check_tasks([root])
    assert tasks == []
    text = [str(p) for p in problems]
    assert any("verifier.collect.0.command" in p for p in text), text  # a hook needs one
    ok = write(
        tmp_path / "u",
        {"task.toml": "[environment]\nfancy = 1\n", "instruction.md": "x\n", "tests/test.sh": ""},
    )
    assert load_task(ok).unknown_keys == ["environment.fancy"]


def test_an_unsupported_key_in_a_step_is_named_with_its_step(tmp_path: Path) -> None:
    toml = '[[steps]]\nname = "one"\n[[steps]]\nname = "two"\n[[steps.verifier.judges]]\nx = 1\n'
    assert any(
        "steps[1].verifier.judges: not supported" in p
        for p in problems_of(multi_step(tmp_path, **{"task.toml": toml}))
    )


# -- env templates -------------------------------------------------------------------------


def test_templates_resolve_from_the_host() -> None:
    env = {"A": "x${HOME}y", "B": "${NOPE:-fallback}", "C": "$$HOME", "D": "${EMPTY:-d}"}
    resolved = resolve_env(env, {"HOME": "/h", "EMPTY": ""})
    assert resolved == {"A": "x/hy", "B": "fallback", "C": "$HOME", "D": "d"}


def test_an_unset_variable_without_default_is_an_error() -> None:
    with pytest.raises(EnvTemplateError, match=r"environment.env.A: \$\{NOPE\} is not set"):
        resolve_env({"A": "${NOPE}"}, {}, where="environment.env")


def test_a_taken_credential_is_refused_by_name_and_by_value() -> None:
    taken = {"OPENAI_API_KEY": "sk-canary-123"}
    with pytest.raises(EnvTemplateError, match="provider credential"):
        resolve_env({"K": "${OPENAI_API_KEY:-x}"}, {}, refused=taken)
    with pytest.raises(EnvTemplateError, match="holds a provider credential"):
        resolve_env({"K": "${COPY}"}, {"COPY": "Bearer sk-canary-123"}, refused=taken)


def test_malformed_templates_are_task_problems(tmp_path: Path) -> None:
    toml = '[environment]\nenv = { A = "${BROKEN" }\n[solution]\nenv = { B = "${1X}" }\n'
    root = write(tmp_path / "t", {"task.toml": toml, "instruction.md": "x\n", "tests/test.sh": ""})
    problems = problems_of(root)
    assert any("environment.env.A: malformed" in p for p in problems), problems
    assert any("solution.env.B: malformed" in p for p in problems), problems


def test_task_env_resolution_covers_every_table(tmp_path: Path) -> None:
    toml = MULTI.replace('STEP = "two"', 'STEP = "${STEP_VALUE}"') + (
        '[environment]\nenv = { E = "${E_VALUE:-e}" }\n[solution]\nenv = { S = "${S_VALUE}" }\n'
    )
    task = load_task(multi_step(tmp_path, **{"task.toml": toml}))
    resolved = resolve_task_env(task, {"STEP_VALUE": "2", "S_VALUE": "s"})
    assert resolved.config.environment.env == {"E": "e"}
    assert resolved.config.solution.env == {"S": "s"}
    assert resolved.views()[1].verifier_env == {"SHARED": "yes", "STEP": "2"}
    assert resolved.hash == task.hash
    with pytest.raises(EnvTemplateError, match="task.toml: steps\\[1\\].verifier.env.STEP"):
        resolve_task_env(task, {"S_VALUE": "s"})


def test_run_refuses_a_task_reading_a_taken_key(tmp_path: Path) -> None:
    toml = '[environment]\nenv = { LEAK = "${ANTHROPIC_API_KEY}" }\n'
    root = write(tmp_path / "t", {"task.toml": toml, "instruction.md": "x\n", "tests/test.sh": ""})
    store = CredentialStore()
    store.set("ANTHROPIC_API_KEY", "sk-ant-canary")
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY.*provider credential"):
        resolve_tasks_env([load_task(root)], {}, store)


# -- --skip-invalid ------------------------------------------------------------------------


def test_skip_invalid_keeps_the_valid_tasks(tmp_path: Path) -> None:
    write(tmp_path / "set/good", {"task.toml": "", "instruction.md": "x\n", "tests/test.sh": ""})
    write(tmp_path / "set/bad", {"task.toml": "", "tests/test.sh": ""})
    with pytest.raises(TaskSetError):
        load_runnable_tasks([tmp_path / "set"])
    tasks, skipped = load_runnable_tasks([tmp_path / "set"], skip_invalid=True)
    assert [t.name for t in tasks] == ["good"]
    assert [str(p) for p in skipped] == [f"{tmp_path / 'set/bad'}: missing instruction.md"]


def test_skip_invalid_with_nothing_valid_still_fails(tmp_path: Path) -> None:
    write(tmp_path / "set/bad", {"task.toml": "", "tests/test.sh": ""})
    with pytest.raises(TaskSetError):
        load_runnable_tasks([tmp_path / "set"], skip_invalid=True)
