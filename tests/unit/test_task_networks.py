"""Harbor's network keys: per-phase policies, allow_internet, defaults, the run's override,
what each backend accepts, and the lines a run prints (issue 24)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest
from pydantic import ValidationError

from harness.config import RunConfig
from harness.executors.base import ExecutorOptions
from harness.executors.local import LocalExecutor
from harness.executors.ray.driver import network_refusal as ray_network_refusal
from harness.runner.network import declarable, network_lines, network_problems
from harness.tasks import TaskConfig, check_tasks, load_task
from harness.tasks.networks import (
    DEFAULT_NETWORK_MODE,
    RunNetwork,
    effective_networks,
    sandbox_networks,
    sandbox_step_networks,
    step_networks,
    task_networks,
    trial_networks,
    with_network,
)
from sandbox.backend import Capacity
from sandbox.network_policy import NetworkPolicy


def config(text: str) -> TaskConfig:
    return TaskConfig.model_validate(tomllib.loads(text))


def modes(text: str, step: int | None = None) -> dict[str, tuple[str, tuple[str, ...], bool]]:
    cfg = config(text)
    chosen = None if step is None else (cfg.steps or [])[step]
    return {
        role: (p.mode, p.allowed_hosts, p.declared)
        for role, p in task_networks(cfg, chosen).items()
    }


def write_task(root: Path, toml: str) -> Path:
    root.mkdir(parents=True)
    (root / "task.toml").write_text(toml)
    (root / "instruction.md").write_text("x\n")
    (root / "tests").mkdir()
    (root / "tests" / "test.sh").write_text("exit 0\n")
    return root


def test_nothing_said_is_harbors_public_undeclared() -> None:
    assert DEFAULT_NETWORK_MODE == "public"
    assert modes("") == {"agent": ("public", (), False), "verifier": ("public", (), False)}


@pytest.mark.parametrize(
    ("toml", "agent", "verifier"),
    [
        ("[environment]\nallow_internet = true\n", "public", "public"),
        ("[environment]\nallow_internet = false\n", "no-network", "no-network"),
        ('[environment]\nnetwork_mode = "no-network"\n', "no-network", "no-network"),
        # Harbor's SWE-bench adapter: public agent and verifier.
        (
            '[agent]\nnetwork_mode = "public"\n[verifier]\nnetwork_mode = "public"\n',
            "public",
            "public",
        ),
        # Terminal-Bench 2: tools fetched at test time, the agent kept off.
        (
            '[environment]\nnetwork_mode = "no-network"\n[verifier]\nnetwork_mode = "public"\n',
            "no-network",
            "public",
        ),
        (
            '[environment]\nallow_internet = false\n[verifier]\nnetwork_mode = "public"\n',
            "no-network",
            "public",
        ),  # fmt: skip
    ],
)
def test_a_phase_overrides_the_environment(toml: str, agent: str, verifier: str) -> None:
    got = modes(toml)
    assert (got["agent"][0], got["verifier"][0]) == (agent, verifier)
    assert got["agent"][2] is True and got["verifier"][2] is True


def test_allowlists_normalise_and_inherit() -> None:
    toml = (
        '[environment]\nnetwork_mode = "allowlist"\n'
        'allowed_hosts = ["PyPI.org.", "*.GitHub.com", "10.0.0.0/8", "[2001:db8::1]", "1.2.3.4"]\n'
        '[agent]\nnetwork_mode = "allowlist"\n'
        '[verifier]\nallowed_hosts = ["files.pythonhosted.org"]\n'
    )
    got = modes(toml)
    listed = ("pypi.org", "*.github.com", "10.0.0.0/8", "2001:db8::1", "1.2.3.4")
    assert got["agent"] == ("allowlist", listed, True)  # the mode restated: the hosts below
    assert got["verifier"] == ("allowlist", ("files.pythonhosted.org",), True)
    empty = modes('[agent]\nnetwork_mode = "allowlist"\n')
    assert empty["agent"] == ("allowlist", (), True)  # nothing listed: nothing gets out
    assert empty["verifier"] == ("public", (), False)


@pytest.mark.parametrize(
    ("toml", "message"),
    [
        ('[environment]\nallow_internet = false\nnetwork_mode = "public"\n', "contradicts"),
        ('[environment]\nallow_internet = true\nnetwork_mode = "allowlist"\n', "contradicts"),
        ('[agent]\nnetwork_mode = "public"\nallowed_hosts = ["a.com"]\n', "only applies"),
        ('[agent]\nnetwork_mode = "open"\n', "network_mode"),
        (
            '[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["https://a.com/x"]\n',
            "host alone",
        ),
        ('[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["a.com:443"]\n', "without ports"),
        ('[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["a.*.com"]\n', "wildcard"),
        ('[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["*.com"]\n', "top-level"),
        ('[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["*"]\n', "wildcard"),
        ('[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["10.0.0.0/33"]\n', "CIDR"),
        ('[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = [""]\n', "empty"),
    ],
)
def test_bad_network_keys_are_task_errors(toml: str, message: str) -> None:
    with pytest.raises(ValidationError, match=message):
        config(toml)


STEPS = (
    '[environment]\nnetwork_mode = "no-network"\n'
    '[verifier]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n'
    '[[steps]]\nname = "one"\n'
    '[[steps]]\nname = "two"\nagent = { network_mode = "public" }\n'
    'verifier = { network_mode = "no-network" }\n'
    '[[steps]]\nname = "three"\n'
    'verifier = { network_mode = "allowlist", allowed_hosts = ["files.pythonhosted.org"] }\n'
    '[[steps]]\nname = "four"\nverifier = { allowed_hosts = ["deb.debian.org"] }\n'
)


def steps_task(root: Path, toml: str = STEPS) -> Path:
    write_task(root, toml)
    for step in tomllib.loads(toml).get("steps", []):
        (root / "steps" / step["name"]).mkdir(parents=True)
        (root / "steps" / step["name"] / "instruction.md").write_text("x\n")
    return root


def test_each_step_resolves_environment_then_phase_then_step() -> None:
    """environment < [agent]/[verifier] < the step's table; each step its own list."""
    got = [modes(STEPS, index) for index in range(4)]
    assert got[0] == {
        "agent": ("no-network", (), True),  # the environment's
        "verifier": ("allowlist", ("pypi.org",), True),  # [verifier] over it
    }
    assert got[1] == {"agent": ("public", (), True), "verifier": ("no-network", (), True)}
    # A step's own allowlist is exactly its own hosts, never the task's too (no union).
    assert got[2]["verifier"] == ("allowlist", ("files.pythonhosted.org",), True)
    # Hosts alone over an allowlist below: the step's hosts, the mode inherited.
    assert got[3]["verifier"] == ("allowlist", ("deb.debian.org",), True)
    assert got[3]["agent"] == got[2]["agent"] == ("no-network", (), True)


def test_the_oracle_runs_each_steps_agent_policy() -> None:
    """The oracle's phase is the agent's: nothing names an oracle table."""
    cfg = config(STEPS)
    run = RunNetwork(enforced=frozenset({"public", "no-network", "allowlist"}))
    per_step = step_networks(cfg, run, cfg.steps or [])
    assert [table["agent"].mode for table in per_step] == [
        "no-network", "public", "no-network", "no-network",
    ]  # fmt: skip
    assert trial_networks(cfg, run, cfg.steps or []) == per_step[0]  # posture: the first
    assert step_networks(config(""), run) == [effective_networks(config(""), run)]


def test_network_none_takes_the_internet_from_every_steps_agent() -> None:
    cfg = config(
        STEPS.replace(
            'agent = { network_mode = "public" }', 'agent = { network_mode = "allowlist" }'
        )
    )
    run = RunNetwork(agent="none", enforced=frozenset({"public", "no-network", "allowlist"}))
    per_step = step_networks(cfg, run, cfg.steps or [])
    assert all(table["agent"] == NetworkPolicy("no-network") for table in per_step)
    assert per_step[0]["verifier"] == NetworkPolicy("allowlist", ("pypi.org",))  # kept
    cfg = config(STEPS)
    assert step_networks(cfg, run, cfg.steps or [])[1]["agent"] == NetworkPolicy("no-network")


def test_steps_may_differ_and_the_sandbox_gets_each_steps(tmp_path: Path) -> None:
    """No refusal: each step's phases get their own (a separate verifier's is its own)."""
    _tasks, problems = check_tasks([steps_task(tmp_path / "steps")])
    assert problems == []
    separate = STEPS.replace(
        '[[steps]]\nname = "two"\n',
        '[[steps]]\nname = "two"\nverifier = { environment_mode = "separate" }\n',
    ).replace(
        'agent = { network_mode = "public" }\nverifier = { network_mode = "no-network" }\n',
        'agent = { network_mode = "public" }\n',
    )
    cfg = config(separate)
    run = RunNetwork(enforced=frozenset({"public", "no-network", "allowlist"}))
    steps = cfg.steps or []
    tables = sandbox_step_networks(cfg, run, steps)
    assert len(tables) == 4 and tables[0] == sandbox_networks(cfg, run, steps)
    # Step two's verifier is a container of its own: its phases here get the environment's.
    assert tables[1] == {"agent": NetworkPolicy("public"), "verifier": NetworkPolicy("no-network")}
    assert effective_networks(cfg, run, steps[1])["verifier"] == NetworkPolicy(
        "allowlist", ("pypi.org",)
    )
    assert sandbox_step_networks(config(""), run) == ()


def test_a_steps_policy_the_backend_cannot_enforce_refuses_the_task_naming_the_step(
    tmp_path: Path,
) -> None:
    task = load_task(steps_task(tmp_path / "steps"))
    local = Capacity(cpus=2, memory_mb=1024, network_modes=frozenset({"no-network"}))
    problems = network_problems([task], RunNetwork(enforced=local.network_modes), local, "local")
    # Step one's verifier (allowlist) is the first refused.
    assert len(problems) == 1 and "step 'one': the verifier phase's network_mode" in problems[0]
    # With no allowlist anywhere, step two's public agent is the one.
    only_two = STEPS.replace('network_mode = "allowlist"', 'network_mode = "no-network"')
    only_two = (
        only_two.replace('allowed_hosts = ["pypi.org"]\n', "")
        .replace(', allowed_hosts = ["files.pythonhosted.org"]', "")
        .replace('verifier = { allowed_hosts = ["deb.debian.org"] }\n', "")
    )
    task = load_task(steps_task(tmp_path / "two", only_two))
    problems = network_problems([task], RunNetwork(enforced=local.network_modes), local, "local")
    assert len(problems) == 1, problems
    assert "step 'two': the agent phase's network_mode = 'public' cannot be enforced" in problems[0]
    none = RunNetwork(agent="none", enforced=local.network_modes)
    assert network_problems([task], none, local, "local") == []
    # One network per trial: a later step's internet cannot be kept from another's phase.
    legacy = Capacity(cpus=2, memory_mb=1024)
    problems = network_problems([task], RunNetwork(), legacy, "docker")
    assert "gives all phases of a trial one network here" in problems[0], problems
    every = frozenset({"public", "no-network", "allowlist"})
    capacity = Capacity(2, 1024, network_modes=every)
    assert network_problems([task], RunNetwork(enforced=every), capacity, "docker") == []
    # The run's one line names the task and the steps whose agent gets the internet.
    assert network_lines([task], RunNetwork(enforced=every)) == [
        "network: the agent phase of 1 task(s) reaches the internet: two (two: public) "
        "(--network none forbids it)"
    ]
    assert network_lines([task], RunNetwork(agent="none", enforced=every)) == []


def test_the_task_hash_is_unchanged_while_the_keys_are_unset(tmp_path: Path) -> None:
    plain = load_task(write_task(tmp_path / "a", "[agent]\ntimeout_sec = 5\n"))
    assert "network_mode" not in plain.config.normalized_json()
    stated = load_task(
        write_task(tmp_path / "b", '[agent]\ntimeout_sec = 5\nnetwork_mode = "public"\n')
    )
    assert '"network_mode":"public"' in stated.config.normalized_json()
    assert plain.hash != stated.hash


def test_the_run_forbids_agents_the_internet_and_keeps_verifiers() -> None:
    cfg = config('[environment]\nnetwork_mode = "public"\n')
    none = effective_networks(cfg, RunNetwork(agent="none", enforced=frozenset({"public"})))
    assert none["agent"] == NetworkPolicy("no-network")
    assert none["verifier"] == NetworkPolicy("public")


def test_an_undeclared_default_runs_public_only_where_the_filter_is_enforced() -> None:
    cfg = config("")
    filtered = RunNetwork(enforced=frozenset({"public", "no-network"}))
    assert effective_networks(cfg, filtered)["agent"] == NetworkPolicy("public", declared=False)
    for run in (RunNetwork(), RunNetwork(enforced=frozenset({"no-network"}))):
        assert effective_networks(cfg, run)["agent"] == NetworkPolicy("no-network", declared=False)


def test_posture_carries_each_phases_policy() -> None:
    posture = with_network({"dropped": True}, NetworkPolicy("allowlist", ("a.com",)))
    assert posture == {
        "dropped": True,
        "network": {"mode": "allowlist", "declared": True, "allowed_hosts": ["a.com"]},
    }
    assert with_network(None, NetworkPolicy("public", declared=False)) == {
        "network": {"mode": "public", "declared": False}
    }


def test_backends_refuse_what_they_cannot_enforce_and_the_run_says_what_it_gives(
    tmp_path: Path,
) -> None:
    tasks = [
        load_task(write_task(tmp_path / "online", '[agent]\nnetwork_mode = "public"\n')),
        load_task(
            write_task(
                tmp_path / "listed",
                '[agent]\nnetwork_mode = "allowlist"\nallowed_hosts = ["pypi.org"]\n',
            )
        ),
        load_task(write_task(tmp_path / "unsaid", "")),
        load_task(write_task(tmp_path / "offline", "[environment]\nallow_internet = false\n")),
    ]
    local = Capacity(cpus=2, memory_mb=1024, network_modes=frozenset({"no-network"}))
    problems = network_problems(tasks, RunNetwork(enforced=local.network_modes), local, "local")
    assert len(problems) == 2, problems
    assert "online/task.toml: the agent phase's network_mode = 'public' cannot be" in problems[0]
    assert "enforced by the local backend (it enforces: no-network)" in problems[0]
    assert "listed/task.toml" in problems[1] and "'allowlist'" in problems[1]
    # --network none: the agents' internet is gone, nothing is refused, one line says so.
    none = RunNetwork(agent="none", enforced=local.network_modes)
    assert network_problems(tasks, none, local, "local") == []
    assert network_lines(tasks, none) == [
        "network: 3 task(s) leave a phase's network_mode unstated, and it runs with "
        "no-network: Harbor's default is public, which this backend cannot enforce "
        "(online, listed, unsaid)"
    ]
    # A runtime registered without networking: the old message is kept.
    runsc = Capacity(cpus=2, memory_mb=1024, network=False)
    assert declarable(runsc) == frozenset({"no-network"})
    assert "--network=none" in network_problems(tasks[:1], RunNetwork(), runsc, "docker")[0]
    # A backend enforcing every mode: no refusal, one line naming the online agents.
    every = frozenset({"public", "no-network", "allowlist"})
    run = RunNetwork(enforced=every)
    assert network_problems(tasks, run, Capacity(2, 1024, network_modes=every), "docker") == []
    assert network_lines(tasks, run) == [
        "network: the agent phase of 3 task(s) reaches the internet: online (public), "
        "listed (allowlist: pypi.org), unsaid (public) (--network none forbids it)"
    ]


def test_the_refusal_says_what_is_missing_and_how_to_fix_it_as_docs_tasks_md_quotes_it(
    tmp_path: Path,
) -> None:
    """The exit-2 message carries the backend's reason (``Capacity.network_problem``).

    The local sandbox's is the one docs/tasks.md quotes; the docker backend's names what
    keeps its egress filter out and how to fix it, for a SWE-bench-style task (its agent
    and its verifier ``public``), where it said only "(it enforces: no-network)".
    """
    import re

    from sandbox.local.sandbox import NETWORK_MODES, NETWORK_PROBLEM

    swe = '[agent]\nnetwork_mode = "public"\n[verifier]\nnetwork_mode = "public"\n'
    tasks = [load_task(write_task(tmp_path / "swe", swe))]
    local = Capacity(2, 1024, network_modes=NETWORK_MODES, network_problem=NETWORK_PROBLEM)
    (problem,) = network_problems(tasks, RunNetwork(enforced=NETWORK_MODES), local, "local")
    doc = (Path(__file__).parents[2] / "docs" / "tasks.md").read_text()
    quoted = re.search(r"by `harness tasks check`: `([^`]+)`\)", " ".join(doc.split()))
    assert quoted is not None, "docs/tasks.md no longer quotes the local sandbox's refusal"
    assert problem.endswith(f": {quoted.group(1)}"), (quoted.group(1), problem)
    # Docker without its filter (what DockerRuntime.capacity() says when iptables is missing).
    why = "iptables is not installed (Debian: apt-get install iptables)"
    docker = Capacity(
        2, 1024, network_modes=frozenset({"no-network"}),
        network_problem="public and allowlist phases need its host egress filter, and "
        f"{why}; run the harness as root on the engine's host with iptables",
    )  # fmt: skip
    (problem,) = network_problems(tasks, RunNetwork(enforced=frozenset()), docker, "docker")
    assert problem.endswith(
        "the agent phase's network_mode = 'public' cannot be enforced by the docker backend "
        f"(it enforces: no-network): public and allowlist phases need its host egress "
        f"filter, and {why}; run the harness as root on the engine's host with iptables, or "
        "with --network none for the agent phase"
    ), problem


def test_a_backend_with_one_network_per_trial_refuses_phases_it_cannot_keep_apart(
    tmp_path: Path,
) -> None:
    """Terminal-Bench 2's shape (no-network agent, public verifier) on today's docker."""
    tb2 = '[environment]\nnetwork_mode = "no-network"\n[verifier]\nnetwork_mode = "public"\n'
    tasks = [load_task(write_task(tmp_path / "tb2", tb2))]
    legacy = Capacity(cpus=2, memory_mb=1024)  # network_modes unset: one network per trial
    problems = network_problems(tasks, RunNetwork(), legacy, "docker")
    assert (
        len(problems) == 1
        and "the agent phase's network_mode = 'no-network' cannot be" in (problems[0])
    )
    assert "gives all phases of a trial one network here" in problems[0]
    per_phase = frozenset({"public", "no-network"})
    capacity = Capacity(cpus=2, memory_mb=1024, network_modes=per_phase)
    assert network_problems(tasks, RunNetwork(enforced=per_phase), capacity, "docker") == []


def test_a_separate_verifiers_policy_is_its_own_containers() -> None:
    """The trial's sandbox keeps the environment's policy; the separate one the verifier's."""
    cfg = config(
        '[environment]\nnetwork_mode = "no-network"\n'
        '[verifier]\nenvironment_mode = "separate"\nnetwork_mode = "public"\n'
    )
    run = RunNetwork(enforced=frozenset({"public", "no-network"}))
    assert sandbox_networks(cfg, run) == {
        "agent": NetworkPolicy("no-network"),
        "verifier": NetworkPolicy("no-network"),
    }
    assert effective_networks(cfg, run)["verifier"] == NetworkPolicy("public")


class RayRefusals(LocalExecutor):
    """An executor refusing phases as the Ray driver does (``driver.network_refusal``)."""

    def network_refusal(self, role: str, mode: str, enforced: frozenset[str] | None) -> str | None:
        return ray_network_refusal(role, mode, enforced)


def test_ray_refuses_a_later_steps_internet_where_the_backend_filters_none(
    tmp_path: Path,
) -> None:
    """Ray's check covers every step: the first step alone (no-network) would pass."""
    toml = (
        '[environment]\nnetwork_mode = "no-network"\n[[steps]]\nname = "one"\n'
        '[[steps]]\nname = "two"\nverifier = { network_mode = "public" }\n'
    )
    task = load_task(steps_task(tmp_path / "ray", toml))
    executor = RayRefusals(ExecutorOptions(run_name="r", config=RunConfig(paths=[str(tmp_path)])))
    unfiltered = Capacity(cpus=2, memory_mb=1024, network_modes=frozenset({"no-network", "public"}))
    problems = network_problems([task], RunNetwork(), unfiltered, "docker", executor)
    assert len(problems) == 1, problems
    assert (
        "step 'two': the verifier phase's network_mode = 'public' is refused with" in (problems[0])
    )
    filtered = RunNetwork(enforced=unfiltered.network_modes)
    assert network_problems([task], filtered, unfiltered, "docker", executor) == []
