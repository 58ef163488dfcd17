"""What the installed-agent tests share: a hello-file copy for a faux script, one run, probes.

Every e2e test of an installed agent (tests/e2e/test_installed_agents.py and
test_agent_<name>.py) drives the real CLI the same way: a copy of
``examples/tasks/hello-file`` whose faux model replays a script written in the CLI's own
tool protocol (:func:`task_set`), one ``harness run`` with canary keys in the harness's
environment (:func:`run_agent`), then judges from outside: the run dir and its transcript
(:func:`assert_hello_transcript`, :func:`assert_did_nothing`), the ATIF export
(:func:`assert_atif_tool_call`), the files holding a canary (:func:`files_holding`), and a
host listener the sandbox must not reach (:class:`HostListener`, :func:`probe_command`). A
pinned version that cannot be had fails a run before any trial
(:func:`assert_unknown_version_refused`).
"""

from __future__ import annotations

import json
import shutil
import socket
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from conftest import EXAMPLES, only_run_dir, read_run_dir, run_cli

from support.docker import docker_client, require_image, unavailable

#: backend id -> (--sandbox, --runtime)
BACKENDS = {
    "local": ("local", None),
    "docker": ("docker", None),
    "runsc": ("docker", "runsc"),
}
BACKEND_PARAMS = [
    pytest.param("local", marks=pytest.mark.root, id="local"),
    pytest.param("docker", marks=pytest.mark.docker, id="docker"),
    pytest.param("runsc", marks=pytest.mark.docker, id="runsc"),
]
#: Local and docker (runc) only. gVisor runs the solving test of one Node-based agent
#: (gemini-cli, claude-code, codex) and one Python-based agent (mini-swe-agent); a CLI's
#: other tests add suite time there, not coverage of a different path.
RUNC_PARAMS = BACKEND_PARAMS[:2]
RUN_TIMEOUT = 900.0  # the first run fetches the CLI from its registry
#: The provider keys the harness is given, each set to the test's canary: none may leak.
CANARY_KEYS = ("ANTHROPIC_API_KEY", "OPENAI_API_KEY", "GEMINI_API_KEY", "GOOGLE_API_KEY")
FAUX_MODEL = "faux/cli-script"


class HostListener:
    """A TCP listener on the host's 127.0.0.1 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _addr = self.sock.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[HostListener]:
    server = HostListener()
    yield server
    server.close()


def probe_command(port: int) -> str:
    """A bash command that tries the host and the internet, plants a file, and dumps env.

    Its findings go to ``probe.txt`` in the workspace (kept in the evidence), one per line
    (:func:`assert_probe` reads them). Its first line is a positive control: the gateway's
    own loopback port, which the sandbox must reach, so a shell that cannot open a TCP
    connection at all (``/dev/tcp`` is bash's, not ``sh``'s) shows as such instead of as
    an unreachable host.
    """
    gateway = (
        'g="${OPENAI_BASE_URL#http://}"; g="${g%%/*}"; '
        '(exec 3<>"/dev/tcp/${g%:*}/${g##*:}") 2>/dev/null && echo GATEWAY-OPEN '
        "|| echo GATEWAY-CLOSED"
    )
    host = f"(exec 3<>/dev/tcp/127.0.0.1/{port}) 2>/dev/null && echo HOST-OPEN || echo HOST-CLOSED"
    net = (
        "(exec 3<>/dev/tcp/registry.npmjs.org/443) 2>/dev/null && echo NET-OPEN || echo NET-CLOSED"
    )
    # The CLI's cache entry is shown read-only (and root-owned): planting a file must fail.
    plant = "(echo x > /opt/harness-agent/planted) 2>/dev/null && echo CACHE-WRITTEN"
    return (
        f"{{ {gateway}; {host}; {net}; {plant}; env; }} > $HOME/probe.txt 2>&1; "
        "cp $HOME/probe.txt probe.txt"
    )


def assert_probe(evidence: Path, listener: HostListener, cache: Path) -> list[str]:
    """What :func:`probe_command` found from inside the trial: no way out, no write.

    The gateway was reachable (the probe could connect at all), the host listener and the
    npm registry were not (and the listener saw no connection), and the CLI's cache entry
    took no file (``cache``: the entry on the host). Judged on whole lines: a dumped
    variable may hold the probe's own text. Returns the probe's lines.
    """
    probe = (evidence / "workspace" / "probe.txt").read_text().splitlines()
    assert probe[:3] == ["GATEWAY-OPEN", "HOST-CLOSED", "NET-CLOSED"], probe
    assert "CACHE-WRITTEN" not in probe, probe
    assert listener.accepted == 0
    assert (cache / "manifest.json").is_file() and not (cache / "planted").exists()
    return probe


def files_holding(root: Path, needle: bytes) -> list[Path]:
    """Every file under ``root`` whose bytes contain ``needle``."""
    return [p for p in root.rglob("*") if p.is_file() and needle in p.read_bytes()]


def task_set(
    tmp_path: Path,
    script: dict[str, Any],
    api: str,
    *,
    memory_mb: int | None = None,
    agent_timeout_sec: int | None = None,
    env: dict[str, str] | None = None,
    instruction: str | None = None,
) -> Path:
    """A copy of examples/tasks/hello-file whose model :data:`FAUX_MODEL` replays ``script``.

    Args:
        tmp_path: Where the task set goes (``tasks/``).
        script: The faux script (docs/model-access.md §5), in the CLI's tool protocol.
        api: The API the faux model speaks (the CLI's).
        memory_mb: The task's memory instead of the example's 512 MB (Node or Bun CLIs).
        agent_timeout_sec: The agent's timeout instead of the example's 60 s (CLIs that
            start slowly on a loaded machine; never asserted on).
        env: The task's ``[environment].env``: variables of every phase, the agent's too
            (taken literally).
        instruction: The task's instruction instead of the example's.
    """
    tasks = tmp_path / "tasks"
    shutil.copytree(EXAMPLES / "hello-file", tasks / "hello-file")
    toml = tasks / "hello-file" / "task.toml"
    text = toml.read_text()
    if memory_mb is not None:
        assert "memory_mb = 512" in text
        text = text.replace("memory_mb = 512", f"memory_mb = {memory_mb}")
    if agent_timeout_sec is not None:
        assert "[agent]\ntimeout_sec = 60" in text
        text = text.replace(
            "[agent]\ntimeout_sec = 60", f"[agent]\ntimeout_sec = {agent_timeout_sec}"
        )
    if env is not None:
        assert "[environment]\n" in text
        # Literal values: an env table reads ${VAR} as a template, and $$ as one $.
        literal = {name: value.replace("$", "$$") for name, value in env.items()}
        table = ", ".join(f"{name} = {json.dumps(value)}" for name, value in literal.items())
        text = text.replace("[environment]\n", f"[environment]\nenv = {{ {table} }}\n")
    toml.write_text(text)
    if instruction is not None:
        (tasks / "hello-file" / "instruction.md").write_text(instruction)
    (tasks / "script.json").write_text(json.dumps(script))
    (tasks / "models.toml").write_text(
        f'[models."{FAUX_MODEL}"]\nscript = "script.json"\napi = "{api}"\n'
    )
    return tasks


def run_agent(tmp_path: Path, backend: str, agent: str, tasks: Path, canary: str) -> Path:
    """One ``harness run TASKS --agent AGENT`` on ``backend``; its run dir.

    Every provider key of :data:`CANARY_KEYS` is ``canary`` in the harness's environment.
    """
    sandbox, runtime = BACKENDS[backend]
    if sandbox == "docker":
        client = docker_client()
        require_image(client)
        if runtime and runtime not in (client.info().get("Runtimes") or {}):
            unavailable(f"runtime {runtime} is not registered (docker/start-engine.sh does it)")
    out = tmp_path / "runs"
    args: list[str | Path] = ["run", tasks, "--agent", agent, "--model", FAUX_MODEL]
    args += ["--sandbox", sandbox, "-o", out]
    if runtime:
        args += ["--runtime", runtime]
    env = dict.fromkeys(CANARY_KEYS, canary) | {"HARNESS_PROVIDER": "", "HARNESS_MODEL": ""}
    result = run_cli(*args, env=env, timeout=RUN_TIMEOUT)
    assert result.code in (0, 1), result
    return only_run_dir(out)


def assert_atif_tool_call(run_dir: Path, evidence: Path, tool: str, needle: str) -> None:
    """``harness export --format atif`` gives the trial a trajectory whose first tool step
    calls ``tool`` with ``needle`` in its arguments, after the user's instruction."""
    exported = run_cli("export", "--format", "atif", run_dir, timeout=120)
    assert exported.code == 0, exported
    trajectory = json.loads((evidence / "agent" / "trajectory.json").read_text())
    assert trajectory["steps"][0]["source"] == "user"
    tool_steps = [s for s in trajectory["steps"] if s.get("tool_calls")]
    assert tool_steps, trajectory["steps"]
    assert tool_steps[0]["tool_calls"][0]["function_name"] == tool
    assert needle in json.dumps(tool_steps[0]["tool_calls"][0]["arguments"])


def assert_told_once(record: dict[str, Any], evidence: Path) -> None:
    """The CLI was told the instruction once, and the record's usage is the gateway's.

    The CLI's first model request holds the task's instruction (``instruction.md``, as
    JSON escapes it) exactly once: a CLI that was also given it on stdin appends it again
    (Claude Code and Codex do). ``usage.source`` says whose count the record's is; the
    CLI's own figures (``usage.agent_log``) appear only where they disagree, and a faux
    model's calls, each logged by the CLI as the gateway counted it, agree.
    """
    instruction = Path(record["task"]["path"], "instruction.md").read_text().strip()
    needle = json.dumps(instruction)[1:-1]
    with (evidence / "model_calls.jsonl").open() as calls:
        first = json.loads(calls.readline())
    assert json.dumps(first["request"]).count(needle) == 1, first["request"]
    usage = record["usage"]
    assert usage["source"] == "gateway" and usage["calls"] >= 1, usage


def listed_with_version(listing: str, name: str, version: str) -> bool:
    """Whether ``harness agents list`` shows ``name`` with ``version`` in its version column."""
    for line in listing.splitlines():
        cells = [c.strip() for c in line.strip("│┃ ").split("│")]
        if len(cells) > 2 and cells[0] == name and cells[1] == version:
            return True
    return False


def assert_hello_transcript(evidence: Path, tool: str, said: str = "Created hello.txt.") -> None:
    """The transcript of a two-tool-call hello-file solve: the instruction, the calls, the end.

    The first event is the user's message, the task's instruction; ``tool`` was called
    twice, first to write ``hello.txt``; both calls have results, the first without an
    error; the agent's closing message ``said`` is there.
    """
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    assert transcript[0]["type"] == "message" and transcript[0]["role"] == "user"
    assert transcript[0]["content"] == (EXAMPLES / "hello-file" / "instruction.md").read_text()
    calls = [e for e in transcript if e["type"] == "tool_call"]
    assert [c["name"] for c in calls] == [tool] * 2
    assert "hello.txt" in json.dumps(calls[0]["arguments"])
    results = [e for e in transcript if e["type"] == "tool_result"]
    assert len(results) == 2 and "error" not in results[0]
    assert any(e["type"] == "message" and e.get("content") == said for e in transcript)


def solved_by(run_dir: Path, name: str, version: str) -> tuple[dict[str, Any], Path]:
    """The run's one trial, completed with reward 1 by agent ``name`` at ``version``.

    Returns its record and evidence dir.
    """
    result = read_run_dir(run_dir)
    [record] = result.records
    assert record["status"] == "completed", record["errors"]
    assert record["reward"] == 1
    agent = record["agent"]
    assert agent["name"] == name and agent["version"] == version
    return record, result.evidence(record)


def zero_reward_run(run_dir: Path) -> tuple[dict[str, Any], Path, list[dict[str, Any]]]:
    """The run's one trial, completed with reward 0: its record, evidence dir and transcript."""
    result = read_run_dir(run_dir)
    [record] = result.records
    assert record["status"] == "completed", record["errors"]
    assert record["reward"] == 0
    evidence = result.evidence(record)
    transcript = [json.loads(line) for line in (evidence / "transcript.jsonl").open()]
    return record, evidence, transcript


def assert_did_nothing(run_dir: Path, canary: str, said: str) -> tuple[dict[str, Any], Path]:
    """The run's one trial: completed, reward 0, no tool call, ``said``; no canary kept.

    For an agent whose faux model only answers in words: the transcript holds ``said`` and
    no tool call, the workspace no ``hello.txt``, and no file of the run dir the canary.
    Returns the trial's record and evidence dir.
    """
    record, evidence, transcript = zero_reward_run(run_dir)
    assert [e for e in transcript if e["type"] == "tool_call"] == []
    assert any(e["type"] == "message" and e.get("content") == said for e in transcript)
    assert not (evidence / "workspace" / "hello.txt").exists()
    assert files_holding(run_dir, canary.encode()) == []
    return record, evidence


def assert_unknown_version_refused(
    tasks: Path, out: Path, agent: str, requirement: str, version: str = "0.0.0.999"
) -> None:
    """``agent.version=<version>`` fails the run before any trial, once, naming what failed.

    Args:
        tasks: A task set for ``agent`` (a faux script: it never runs).
        out: The run's output dir (removed after).
        agent: The installed agent's name.
        requirement: What the install tried, as the error names it
            (``mini-swe-agent==0.0.0.999``).
        version: The version asked for, one no registry has.
    """
    result = run_cli(
        "run", tasks, "--agent", agent, "--model", FAUX_MODEL,
        "--set", f"agent.version={version}", "-o", out,
        env={"HARNESS_PROVIDER": "", "HARNESS_MODEL": ""}, timeout=600,
    )  # fmt: skip
    assert result.code == 2, result
    errors = result.error_lines()
    assert len([line for line in errors if f"cannot install agent {agent}" in line]) == 1
    assert requirement in result.stderr and "agent.version" in result.stderr
    assert not out.exists() or not list(out.glob("*/trials.jsonl"))
    shutil.rmtree(out, ignore_errors=True)
