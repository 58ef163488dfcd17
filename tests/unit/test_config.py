"""The run config: layers (file < options < --set), validation once, round trip, diff."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.config import (
    ConfigError,
    RetryConfig,
    RunConfig,
    config_diff,
    load_saved_config,
    parse_set,
    read_config_file,
    resolve_config,
    save_config,
    secret_keys,
)


def _write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_layers_file_then_options_then_sets(tmp_path: Path) -> None:
    config_file = _write(
        tmp_path / "cfg" / "run.toml",
        "rollouts = 3\n"
        '[tasks]\npaths = ["tasks"]\nseed = 5\n'
        '[agent]\nname = "nop"\n'
        "[retry]\nmax_retries = 4\nbackoff_sec = 0.5\n",
    )
    config = resolve_config(
        file=config_file,
        options={"rollouts": 2, "retry": {"backoff_sec": 2.0}},
        sets=["tasks.seed=9", "retry.include=['environment_error', 'SupervisorError']"],
        cwd=tmp_path,
    )
    assert config.agent.name == "nop"  # from the file
    assert config.rollouts == 2  # an option beats the file
    assert config.tasks.seed == 9  # --set beats both
    # Tables merge key by key: the file's max_retries survives the option's backoff_sec.
    assert config.retry.max_retries == 4
    assert config.retry.backoff_sec == 2.0
    assert config.retry.include == ["environment_error", "SupervisorError"]
    # Paths in a file are relative to the file's directory.
    assert config.tasks.paths == [str(tmp_path / "cfg" / "tasks")]


def test_command_line_paths_are_relative_to_cwd(tmp_path: Path) -> None:
    config = resolve_config(sets=['tasks.paths=["a", "/abs/b"]', "output_dir=out"], cwd=tmp_path)
    assert config.tasks.paths == [str(tmp_path / "a"), "/abs/b"]
    assert config.output_dir == str(tmp_path / "out")
    # The default output dir too: a resume from elsewhere must find the same place.
    assert resolve_config(sets=["paths=['a']"], cwd=tmp_path).output_dir == str(tmp_path / "runs")


@pytest.mark.parametrize(
    ("item", "key", "value"),
    [
        ("rollouts=3", ["rollouts"], 3),
        ("tasks.shuffle=true", ["tasks", "shuffle"], True),
        ("threshold=0.5", ["threshold"], 0.5),
        ('agent.cmd="true"', ["agent", "cmd"], "true"),
        ("agent.name=nop", ["agent", "name"], "nop"),  # not TOML: taken as a plain string
        ("agent.kwargs.max_turns=5", ["agent", "kwargs", "max_turns"], 5),
        ("sandbox.backend=docker", ["sandbox", "backend"], "docker"),
        ("model=gpt-4o-mini", ["model"], "gpt-4o-mini"),
        ('tasks.paths=["x", "y"]', ["tasks", "paths"], ["x", "y"]),
        ("retry.max_retries = 0", ["retry", "max_retries"], 0),
        ("agent.cmd=echo a=b", ["agent", "cmd"], "echo a=b"),
        # harness 0.1's flat keys go to their sections
        ('agent_cmd="true"', ["agent", "cmd"], "true"),
        ("agent=nop", ["agent", "name"], "nop"),
        ("sandbox=docker", ["sandbox", "backend"], "docker"),
        ('paths=["x", "y"]', ["tasks", "paths"], ["x", "y"]),
        ("task_names=['a*']", ["tasks", "names"], ["a*"]),
        ("max_turns=3", ["agent", "kwargs", "max_turns"], 3),
        ("sandbox_uid=70000", ["sandbox", "uid"], 70000),
    ],
)
def test_parse_set(item: str, key: list[str], value: object) -> None:
    assert parse_set(item) == (key, value)


@pytest.mark.parametrize("item", ["rollouts", "=3", "a..b=1", "retry.=1", "a b=1"])
def test_parse_set_rejects_malformed_items(item: str) -> None:
    with pytest.raises(ConfigError, match="--set"):
        parse_set(item)


def test_set_through_a_value_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="model is a value, not a table"):
        resolve_config(sets=["paths=['t']", "model=a/b", "model.x=1"], cwd=tmp_path)


@pytest.mark.parametrize(
    ("sets", "named"),
    [
        (["no_such_key=1"], "'no_such_key'"),
        (["retry.max_retry=1"], "'retry.max_retry'"),
        (["retry={max_retries = 1, nope = 2}"], "'retry.nope'"),
        (["agent.x=1"], "'agent.x'"),
        (["tasks.name=['a']"], "'tasks.name'"),
    ],
)
def test_unknown_keys_are_errors_naming_them(tmp_path: Path, sets: list[str], named: str) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_config(sets=["paths=['t']", *sets], cwd=tmp_path)
    assert f"unknown config key {named}" in str(info.value)


def test_invalid_values_name_the_key(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as info:
        resolve_config(sets=["paths=['t']", "rollouts=0", "retry.jitter=2"], cwd=tmp_path)
    text = str(info.value)
    assert "rollouts:" in text and "retry.jitter:" in text


def test_a_flat_key_and_its_section_may_not_disagree(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="'agent_cmd' and 'agent.cmd' both given"):
        read_config_file(_write(tmp_path / "c.toml", 'agent_cmd = "a"\n[agent]\ncmd = "b"\n'))
    same = read_config_file(_write(tmp_path / "d.toml", 'agent_cmd = "a"\n[agent]\ncmd = "a"\n'))
    assert same["agent"] == {"cmd": "a"}


def test_the_constructor_takes_sections_and_flat_keys_alike() -> None:
    flat = RunConfig(paths=["/t"], agent="command", agent_cmd="x", sandbox="docker", max_turns=4)
    sections = RunConfig.model_validate(
        {
            "tasks": {"paths": ["/t"]},
            "agent": {"name": "command", "cmd": "x", "kwargs": {"max_turns": 4}},
            "sandbox": {"backend": "docker"},
        }
    )
    assert flat == sections
    assert flat.agent.kwargs == {"max_turns": 4} and flat.sandbox.backend == "docker"


def test_missing_paths_says_how_to_give_them(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="pass task dirs as arguments"):
        resolve_config(cwd=tmp_path)


def test_config_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read config file"):
        read_config_file(tmp_path / "missing.toml")
    with pytest.raises(ConfigError, match="not valid TOML"):
        read_config_file(_write(tmp_path / "bad.toml", "paths = [\n"))
    with pytest.raises(ConfigError, match="unknown top-level key"):
        read_config_file(_write(tmp_path / "two.toml", '[run]\npaths = ["t"]\n[other]\nx = 1\n'))


def test_saved_config_round_trips_and_starts_a_new_run(tmp_path: Path) -> None:
    config = resolve_config(
        sets=[
            "paths=['tasks']",
            "agent.name=command",
            'agent.cmd="my-agent --flag \\"quoted\\" {workspace}"',
            "rollouts=3",
            "concurrency=4",
            "agent_concurrency=2",
            "fail_under=0.25",
            "tasks.names=['a*', 'b?']",
            "tasks.categories=['x']",
            "run_name=my-run",
            "retry.max_retries=5",
            "retry.exclude=['TimeoutError']",
            "retry.backoff_sec=0.125",
        ],
        cwd=tmp_path,
    )
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    save_config(config, run_dir / "config.toml", extra={"versions": {"harness": "9.9"}})
    assert load_saved_config(run_dir) == config
    # The saved file ([run] plus [versions]) is itself a config file for a new run.
    again = resolve_config(file=run_dir / "config.toml", cwd=Path("/"))
    assert again == config
    raw = tomllib.loads((run_dir / "config.toml").read_text())
    assert raw["run"]["retry"]["max_retries"] == 5
    assert raw["run"]["agent"]["name"] == "command"
    assert raw["run"]["tasks"]["names"] == ["a*", "b?"]
    assert raw["versions"] == {"harness": "9.9"}
    assert "model" not in raw["run"]  # None values are left out, and load back as None


def test_load_saved_config_explains_a_non_run_dir(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not a run dir"):
        load_saved_config(tmp_path)
    _write(tmp_path / "config.toml", '[run]\npaths = ["t"]\nrollouts = "many"\n')
    with pytest.raises(ConfigError, match=r"config.toml: rollouts"):
        load_saved_config(tmp_path)


def test_config_diff_names_keys_and_ignores_concurrency() -> None:
    saved = RunConfig(paths=["/t"], agent="oracle", rollouts=1, concurrency=1)
    same_but_faster = RunConfig(
        paths=["/t"], agent="oracle", rollouts=1, concurrency=8, agent_concurrency=2
    )
    assert config_diff(saved, same_but_faster) == []
    other = RunConfig(
        paths=["/t"], agent="nop", rollouts=1, retry=RetryConfig(max_retries=0), concurrency=8
    )
    assert config_diff(saved, other) == [
        ("agent.name", "oracle", "nop"),
        ("retry.max_retries", 2, 0),
    ]


def test_secret_keys_finds_a_credential_value() -> None:
    key = "sk-test-0123456789abcdef"
    config = RunConfig(paths=["/t"], agent="command", agent_cmd=f"agent --key {key}")
    assert secret_keys(config, [key, ""]) == ["agent.cmd"]
    assert secret_keys(config, ["other-secret-value"]) == []
    assert secret_keys(RunConfig(paths=[f"/tasks/{key}"]), [key]) == ["tasks.paths"]
    kwargs = RunConfig(paths=["/t"], agent={"name": "x", "kwargs": {"api_key": key}})
    assert secret_keys(kwargs, [key]) == ["agent.kwargs.api_key"]


def test_run_name_must_be_a_safe_name() -> None:
    assert RunConfig(paths=["/t"], run_name="nightly.2026-11-30_a").run_name
    for bad in ("../escape", "", "-x", "a/b", "x" * 200):
        with pytest.raises(ValueError):
            RunConfig(paths=["/t"], run_name=bad)


# ------------------------------------------------------------------------------ retry rules


def test_retry_defaults_retry_environment_errors_only() -> None:
    retry = RetryConfig()
    assert retry.max_retries == 2
    assert retry.retryable("environment_error", ["SupervisorError"])
    for status in ("agent_error", "agent_timeout", "verifier_error", "completed", "cancelled"):
        assert not retry.retryable(status, ["SupervisorError"]), status


def test_retry_include_and_exclude_match_status_or_error_type() -> None:
    retry = RetryConfig(include=["environment_error", "TimeoutError"], exclude=["ImageBuildError"])
    assert retry.retryable("agent_timeout", ["TimeoutError"])
    assert not retry.retryable("environment_error", ["ImageBuildError"])
    assert retry.retryable("environment_error", ["EnvironmentStartError"])
    with pytest.raises(ValueError, match="never be retried"):
        RetryConfig(include=["completed"])


def test_backoff_grows_is_capped_and_jittered() -> None:
    retry = RetryConfig(backoff_sec=1.0, backoff_multiplier=2.0, backoff_max_sec=5.0, jitter=0.5)
    assert [retry.delay(n, 0.0) for n in (1, 2, 3, 4)] == [1.0, 2.0, 4.0, 5.0]
    assert retry.delay(2, 0.999) == pytest.approx(2.0 * (1 - 0.5 * 0.999))
    assert RetryConfig(jitter=0.0).delay(1, 0.9) == 1.0


def test_pull_and_skip_invalid_live_in_their_sections_and_load_flat() -> None:
    flat = RunConfig(paths=["/t"], pull="never", skip_invalid=True)
    sections = RunConfig.model_validate(
        {"tasks": {"paths": ["/t"], "skip_invalid": True}, "sandbox": {"pull": "never"}}
    )
    assert flat == sections
    assert RunConfig(paths=["/t"]).sandbox.pull == "missing"
    with pytest.raises(ValidationError, match="sandbox.pull"):
        RunConfig.model_validate({"tasks": {"paths": ["/t"]}, "sandbox": {"pull": "sometimes"}})
