"""Every installed agent CLI is told to stay quiet and never to ask (issue 25).

For each adapter, what the CLI is handed (its environment, its command line and
the config files prepare() writes into the trial's HOME, parsed as the CLI parses them)
turns off its telemetry or analytics, its update checks and its non-essential traffic or
feedback, and approves its actions without a prompt (the sandbox is disposable). None of it
holds a key: the token reaches the CLI only from the gateway's secret environment, which the
adapter names (``OPENAI_API_KEY``) but never fills, even when the host has real keys set.

No CLI is fetched: a Python agent is given a cache entry holding only the runtime's layout
(its interpreter and loader files), and any fetch fails the test.
"""

from __future__ import annotations

import json
import re
import shlex
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from harness.agents.installed import python_agent
from harness.agents.installed.aider import Aider, as_message
from harness.agents.installed.base import InstalledAgent
from harness.agents.installed.cache import AgentCache, CacheEntry, InstallSpec
from harness.agents.installed.claude_code import ClaudeCode
from harness.agents.installed.cline import Cline
from harness.agents.installed.codex import Codex
from harness.agents.installed.gemini_cli import GeminiCli
from harness.agents.installed.mini_swe_agent import MiniSweAgent
from harness.agents.installed.opencode import OpenCode
from harness.agents.installed.openhands_sdk import DRIVER_FILE, OpenHandsSdk
from harness.agents.installed.python_agent import PythonInstalledAgent
from harness.agents.installed.qwen_code import QwenCode
from harness.models.catalog import ModelSpec
from harness.tasks.loader import load_task
from sandbox.backend import SandboxSpec
from sandbox.fake import FakeSandbox

EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "tasks"
#: The host's real keys, planted where a careless adapter would copy them from.
CANARY = "sk-ant-canary-0123456789abcdef0123456789abcdef"
HOST_KEYS = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
#: Shapes of real provider keys, and of the gateway's own trial token (``hgw-``).
KEY_SHAPES = re.compile(
    r"sk-[A-Za-z0-9_-]{12,}|sk-ant-|AIza[0-9A-Za-z_-]{20,}|hgw-[A-Za-z0-9_-]{8,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}|xox[abp]-"
)

#: Config field names that hold a credential (``apiKey``, ``env_key``, ``bearer_token``), not
#: a count (``map-tokens``).
KEY_NAME = re.compile(r"(^|[_-])key$|apikey$|token$|secret|password|bearer|authorization", re.I)


class NoFetchCache(AgentCache):
    """A cache that fails the test if anything is fetched into it."""

    def ensure(self, spec: InstallSpec) -> CacheEntry:
        raise AssertionError(f"{spec.agent} was fetched: these tests install nothing")


@dataclass(frozen=True)
class Handed:
    """What the CLI is given: its command line, environment and HOME files (by name)."""

    argv: list[str]
    env: dict[str, str]
    files: dict[str, str]
    home: str

    def file(self, path: str) -> str:
        """The text of a file written at ``path`` (absolute, in the sandbox)."""
        assert path.startswith(f"{self.home}/"), path
        rel = path.removeprefix(f"{self.home}/")
        assert rel in self.files, (rel, sorted(self.files))
        return self.files[rel]

    def strings(self) -> Iterator[str]:
        """Every value handed to the CLI."""
        yield from self.argv
        yield from self.env
        yield from self.env.values()
        yield from self.files
        yield from self.files.values()


def fake_runtime_entry(agent: PythonInstalledAgent, root: Path) -> CacheEntry:
    """An entry with only the layout the in-sandbox command names (no CLI, no fetch)."""
    for rel in ("python/bin/python3.11", "python/libs/ld-linux-x86-64.so.2"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text("")
    return CacheEntry(spec=agent.install_spec(), path=root, tree="0" * 64)


def handed(
    agent_class: type[InstalledAgent],
    provider: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Handed:
    """Prepare and command ``agent_class`` for the hello-file task in a fake sandbox."""
    for name in HOST_KEYS:
        monkeypatch.setenv(name, CANARY)

    def no_fetch(*args: object, **kwargs: object) -> CacheEntry:
        raise AssertionError("a Python agent was fetched: these tests install nothing")

    monkeypatch.setattr(python_agent, "ensure_python_agent", no_fetch)
    agent = agent_class(cache=NoFetchCache(tmp_path / "cache"))
    if isinstance(agent, PythonInstalledAgent):
        agent.entry = fake_runtime_entry(agent, tmp_path / "entry")
    agent.bind_model(
        ModelSpec(provider=provider, name="cli-script", upstream="cli-script", api="openai-chat")
    )
    task = load_task(EXAMPLES / "hello-file")
    sandbox = FakeSandbox(SandboxSpec(trial_id="t1"))
    agent.prepare(task, sandbox)
    command = agent.command(task, sandbox)
    home = sandbox.paths.home
    files = {}
    for path, data in sandbox.files.items():
        assert path.startswith(f"{home}/"), f"{path} is written outside the trial's HOME"
        files[path.removeprefix(f"{home}/")] = data.decode()
    assert command.env is not None
    return Handed(argv=list(command.argv), env=dict(command.env), files=files, home=home)


def option(argv: list[str], name: str) -> str:
    """The value given to option ``name`` (``--name VALUE``; once)."""
    assert argv.count(name) == 1, (name, argv)
    return argv[argv.index(name) + 1]


# -- each CLI's own switches -----------------------------------------------------------------


def check_claude_code(cli: Handed) -> None:
    """Claude Code's environment variables (its settings docs), and its skip-permissions flag."""
    for switch in (
        "DISABLE_TELEMETRY",
        "DISABLE_ERROR_REPORTING",
        "DISABLE_AUTOUPDATER",
        "DISABLE_BUG_COMMAND",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC",
        "CLAUDE_CODE_DISABLE_FEEDBACK_SURVEY",
    ):
        assert cli.env.get(switch) == "1", switch
    assert "--dangerously-skip-permissions" in cli.argv
    assert cli.env["IS_SANDBOX"] == "1"  # the flag is then allowed for root too
    assert "-p" in cli.argv  # print mode: never an interactive session
    assert cli.files == {}


def check_codex(cli: Handed) -> None:
    """Codex's ``config.toml``, as its launcher installs it in ``$CODEX_HOME``."""
    script = cli.argv[2]
    copy = re.search(r'cp "\$HOME/([^"]+)" "\$CODEX_HOME/config\.toml"', script)
    assert copy is not None, script
    config = tomllib.loads(cli.files[copy.group(1)])
    assert config["check_for_update_on_startup"] is False
    assert config["analytics"] == {"enabled": False}
    assert config["feedback"] == {"enabled": False}
    assert config["history"] == {"persistence": "none"}
    assert config["web_search"] == "disabled"  # hosted: the gateway refuses it off public
    assert "otel" not in config  # its OpenTelemetry export is off unless configured
    assert config["approval_policy"] == "never"
    assert config["sandbox_mode"] == "danger-full-access"  # ours is the sandbox
    assert "--dangerously-bypass-approvals-and-sandbox" in shlex.split(script)
    assert script.rstrip().endswith("< /dev/null")  # it would append stdin to the prompt
    provider = config["model_providers"][config["model_provider"]]
    assert provider["env_key"] == "OPENAI_API_KEY"
    assert not {"api_key", "experimental_bearer_token", "http_headers"} & set(provider)
    assert cli.env["CODEX_HOME"] == f"{cli.home}/.codex"


def check_gemini_cli(cli: Handed) -> None:
    """Gemini CLI's ``settings.json`` (as its launcher installs it) and its environment."""
    script = cli.argv[2]
    copy = re.search(r'cp "\$HOME/([^"]+)" "\$HOME/\.gemini/settings\.json"', script)
    assert copy is not None, script
    settings = json.loads(cli.files[copy.group(1)])
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["telemetry"]["enabled"] is False
    assert settings["telemetry"]["logPrompts"] is False
    assert settings["general"]["enableAutoUpdate"] is False
    assert settings["general"]["enableAutoUpdateNotification"] is False
    assert settings["security"]["auth"]["selectedType"] == "gemini-api-key"
    assert "apiKey" not in json.dumps(settings)
    assert cli.env["GEMINI_TELEMETRY_ENABLED"] == "false"
    assert cli.env["NO_UPDATE_NOTIFIER"] == "1"
    assert cli.env["GEMINI_CLI_TRUST_WORKSPACE"] == "true"
    assert option(cli.argv, "--approval-mode") == "yolo"
    assert script.rstrip().endswith("< /dev/null")


def check_opencode(cli: Handed) -> None:
    """OpenCode's config (``$OPENCODE_CONFIG``) and its ``OPENCODE_DISABLE_*`` variables."""
    config = json.loads(cli.file(cli.env["OPENCODE_CONFIG"]))
    assert config["autoupdate"] is False
    assert config["share"] == "disabled"
    assert config["agent"]["title"] == {"disable": True}  # a background model call
    # Every permission is settled in advance: no question is ever asked.
    assert config["permission"] == {"edit": "allow", "bash": "allow", "webfetch": "deny"}
    [provider] = config["provider"].values()
    assert provider["options"]["apiKey"] == "{env:OPENAI_API_KEY}"
    assert config["enabled_providers"] == list(config["provider"])
    for switch in ("AUTOUPDATE", "MODELS_FETCH", "SHARE", "LSP_DOWNLOAD", "DEFAULT_PLUGINS"):
        assert cli.env[f"OPENCODE_DISABLE_{switch}"] == "1", switch
    assert cli.argv[1] == "run"  # one non-interactive run


def check_mini_swe_agent(cli: Handed) -> None:
    """mini-swe-agent's ``MSWEA_*`` variables and flags, and litellm's download switches."""
    assert cli.env["MSWEA_CONFIGURED"] == "true"  # no first-run setup prompt
    assert cli.env["MSWEA_GLOBAL_CONFIG_DIR"].startswith(f"{cli.home}/")
    assert cli.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert cli.env["LITELLM_OFFLINE_MODE"] == "true"
    assert cli.env["LITELLM_TELEMETRY"] == "False"
    assert {"--yolo", "--exit-immediately"} <= set(cli.argv)  # no confirmations, no prompt
    assert "-I" in cli.argv  # the workspace cannot steer its Python


def check_openhands_sdk(cli: Handed) -> None:
    """The OpenHands SDK's banner, litellm's downloads and telemetry; its driver's LLM."""
    assert cli.env["OPENHANDS_SUPPRESS_BANNER"] == "1"
    assert cli.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    assert cli.env["LITELLM_OFFLINE_MODE"] == "true"
    assert cli.env["LITELLM_TELEMETRY"] == "False"
    assert "-I" in cli.argv and cli.argv[cli.argv.index("-I") + 3] == f"{cli.home}/{DRIVER_FILE}"
    driver = cli.file(f"{cli.home}/{DRIVER_FILE}")
    # The gateway's chat API with the trial token, whatever model name the SDK would route.
    assert 'api_mode="chat"' in driver and 'os.environ["OPENAI_API_KEY"]' in driver
    assert cli.argv[cli.argv.index("-I") + 4] == "openai/cli-script"


def check_aider(cli: Handed) -> None:
    """aider's own config file (the only one it reads), its env file and environment."""
    config = yaml.safe_load(cli.file(option(cli.argv, "--config")))
    assert config["analytics-disable"] is True
    assert config["check-update"] is False
    assert config["show-release-notes"] is False
    assert config["show-model-warnings"] is False
    assert config["detect-urls"] is False  # it would offer to fetch a URL it sees
    assert config["yes-always"] is True
    assert config["suggest-shell-commands"] is False
    assert config["git"] is False and config["auto-commits"] is False
    assert cli.env["AIDER_ANALYTICS"] == "false"
    assert cli.env["LITELLM_LOCAL_MODEL_COST_MAP"] == "True"
    env_file = cli.file(option(cli.argv, "--env-file"))
    assert [line for line in env_file.splitlines() if not line.startswith("#")] == []
    assert "--message" in cli.argv  # one message, then it exits
    assert option(cli.argv, "--message") == load_task(EXAMPLES / "hello-file").instruction


def check_qwen_code(cli: Handed) -> None:
    """Qwen Code's settings (read as its system settings, which outrank any other) and env."""
    settings = json.loads(cli.file(cli.env["QWEN_CODE_SYSTEM_SETTINGS_PATH"]))
    assert settings["privacy"]["usageStatisticsEnabled"] is False
    assert settings["telemetry"] == {"enabled": False, "logPrompts": False}
    assert settings["general"]["enableAutoUpdate"] is False
    assert settings["general"]["disableAutoUpdate"] is True
    assert settings["general"]["disableUpdateNag"] is True
    assert settings["security"]["auth"]["selectedType"] == "openai"
    # Its background model calls after a turn: memory extraction, consolidation, skills.
    assert set(settings["memory"].values()) == {False}
    assert cli.env["QWEN_USAGE_STATISTICS_ENABLED"] == "false"
    assert cli.env["QWEN_DISABLE_AUTO_TITLE"] == "1"  # a background call naming the session
    assert cli.env["QWEN_CODE_NO_RELAUNCH"] == "true"
    assert cli.env["NO_UPDATE_NOTIFIER"] == "1"
    assert option(cli.argv, "--approval-mode") == "yolo"
    assert option(cli.argv, "--output-format") == "stream-json"
    # Its bundle itself, not the launcher that would load a downloaded update instead.
    assert cli.argv[1].endswith("/@qwen-code/qwen-code/cli.js")
    prompt = [a for a in cli.argv if a.startswith("--prompt=")]
    assert prompt == ["--prompt=" + load_task(EXAMPLES / "hello-file").instruction]


def check_cline(cli: Handed) -> None:
    """Cline's global settings (``$CLINE_GLOBAL_SETTINGS_PATH``), its launcher and env."""
    settings = json.loads(cli.file(cli.env["CLINE_GLOBAL_SETTINGS_PATH"]))
    assert settings == {"telemetryOptOut": True, "autoUpdateEnabled": False}
    assert cli.env["CLINE_SESSION_BACKEND_MODE"] == "local"  # no background hub daemon
    script = cli.argv[2]
    # The provider is configured from the gateway's variables inside the sandbox: the
    # token is never in the argv the harness builds, only its variable's name.
    assert '-k "$OPENAI_API_KEY"' in script and '-b "$OPENAI_BASE_URL"' in script
    assert "--auto-approve false" not in script  # every tool call approved (its default)
    assert script.rstrip().endswith("< /dev/null")
    assert cli.argv[-1] == load_task(EXAMPLES / "hello-file").instruction


@pytest.mark.parametrize("instruction", ["/app/main.py crashes: fix it", "!true", "/run ls"])
def test_an_instruction_aider_would_run_as_a_command_is_its_prompt(instruction: str) -> None:
    # aider runs a message starting with "/" as its in-chat command, "!" as a shell command.
    message = as_message(instruction)
    assert message[0] not in "/!" and message.strip() == instruction
    assert as_message("Create hello.txt") == "Create hello.txt"  # others are left as they are


@dataclass(frozen=True)
class Case:
    """An adapter, the model provider it is run with, and the check of its switches."""

    agent: type[InstalledAgent]
    provider: str
    check: Callable[[Handed], None]


CASES = {
    "claude-code": Case(ClaudeCode, "anthropic", check_claude_code),
    "codex": Case(Codex, "openai", check_codex),
    "gemini-cli": Case(GeminiCli, "google", check_gemini_cli),
    "opencode": Case(OpenCode, "openai", check_opencode),
    "mini-swe-agent": Case(MiniSweAgent, "openai", check_mini_swe_agent),
    "aider": Case(Aider, "anthropic", check_aider),
    "qwen-code": Case(QwenCode, "openai", check_qwen_code),
    "cline": Case(Cline, "openai", check_cline),
    "openhands-sdk": Case(OpenHandsSdk, "openai", check_openhands_sdk),
}


def test_every_installed_agent_is_covered() -> None:
    assert {case.agent.name for case in CASES.values()} == set(CASES)
    assert set(CASES) == {
        "claude-code",
        "codex",
        "gemini-cli",
        "opencode",
        "mini-swe-agent",
        "aider",
        "qwen-code",
        "cline",
        "openhands-sdk",
    }


@pytest.mark.parametrize("name", list(CASES))
def test_telemetry_updates_and_prompts_are_off(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = CASES[name]
    case.check(handed(case.agent, case.provider, tmp_path, monkeypatch))


@pytest.mark.parametrize("name", list(CASES))
def test_no_key_is_handed_to_the_cli(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    case = CASES[name]
    cli = handed(case.agent, case.provider, tmp_path, monkeypatch)
    values = list(cli.strings())
    assert [v for v in values if CANARY in v] == []
    assert [m.group(0) for v in values for m in KEY_SHAPES.finditer(v)] == []
    # The key variables come from the gateway's secret environment only, never the adapter.
    assert not set(HOST_KEYS) & set(cli.env)
    # Config fields that take a key hold only a reference to that environment.
    for rel, text in cli.files.items():
        for key, value in key_fields(parsed(rel, text)):
            assert value in ("OPENAI_API_KEY", "{env:OPENAI_API_KEY}"), (rel, key, value)


def parsed(rel: str, text: str) -> Any:
    """A HOME file as its CLI reads it (TOML, JSON or YAML by its name)."""
    if rel.endswith(".toml"):
        return tomllib.loads(text)
    if rel.endswith(".json"):
        return json.loads(text)
    if rel.endswith((".yml", ".yaml")):
        return yaml.safe_load(text)
    return {}  # aider's env file: checked to hold no variable at all


def key_fields(value: Any, name: str = "") -> Iterator[tuple[str, Any]]:
    """Every field whose name says it holds a key or token, at any depth."""
    if isinstance(value, dict):
        for key, item in value.items():
            if KEY_NAME.search(str(key)) and not isinstance(item, dict | list):
                yield f"{name}.{key}", item
            yield from key_fields(item, f"{name}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from key_fields(item, f"{name}[{index}]")


def test_key_fields_finds_a_planted_key() -> None:
    # The scan above would see a key written under any of these names.
    config = {
        "a": {"apiKey": "x", "map-tokens": 0},
        "providers": [{"bearer_token": "y"}],
        "env_key": "OPENAI_API_KEY",
    }
    assert list(key_fields(config)) == [
        (".a.apiKey", "x"),
        (".providers[0].bearer_token", "y"),
        (".env_key", "OPENAI_API_KEY"),
    ]
    assert KEY_SHAPES.search("Bearer " + CANARY) and KEY_SHAPES.search("hgw-abcdefghijkl")
