"""The one merge rule of a phase's environment: the image's ENV under the task's and ours."""

from __future__ import annotations

from collections.abc import Callable, Mapping

import pytest

from harness.tasks import Task
from harness.trial.env import (
    RECORDED_NAMES,
    ImageEnv,
    agent_env,
    grader_env,
    image_env,
    image_env_record,
    merge_phase_env,
)
from sandbox.backend import SandboxSpec
from sandbox.environment import FIXED_PATH
from sandbox.fake import FakeSandbox
from sandbox.image_config import ImageConfig
from sandbox.verifier_tools import TOOLS_SITE

BASE = {
    "LANG": "host-lang",
    "PATH": FIXED_PATH,
    "HOME": "/t/home",
    "USERPROFILE": "/t/home",
    "XDG_CONFIG_HOME": "/t/home/.config",
    "XDG_CACHE_HOME": "/t/home/.cache",
    "XDG_DATA_HOME": "/t/home/.local/share",
    "XDG_STATE_HOME": "/t/home/.local/state",
    "XDG_RUNTIME_DIR": "/t/home/.run",
    "TMPDIR": "/t/home/tmp",
}

# (case, image ENV, task layers, ours, expected subset of the result, names absent)
CASES: list[
    tuple[
        str,
        dict[str, str],
        list[dict[str, str]],
        dict[str, str],
        dict[str, str],
        tuple[str, ...],
    ]
] = [
    ("no image: fixed PATH", {}, [], {}, {"PATH": FIXED_PATH, "LANG": "host-lang"}, ()),
    (
        "image ENV and PATH reach the phase",
        {"FOO": "x", "PATH": "/opt/tool/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
        [],
        {},
        {"FOO": "x", "PATH": "/opt/tool/bin:/usr/bin:/bin", "LANG": "C.UTF-8"},
        (),
    ),
    (
        "HOME, TMPDIR, XDG_* are the phase's, never the image's",
        {"HOME": "/root", "TMPDIR": "/img-tmp", "XDG_CACHE_HOME": "/c", "XDG_DATA_DIRS": "/d"},
        [],
        {},
        {"HOME": "/t/home", "TMPDIR": "/t/home/tmp", "XDG_CACHE_HOME": "/t/home/.cache"},
        (),
    ),
    (
        "an image XDG_ name we do not set passes",
        {"XDG_DATA_DIRS": "/usr/share"},
        [],
        {},
        {"XDG_DATA_DIRS": "/usr/share"},
        (),
    ),
    (
        "the gateway's names and HARNESS_* are never the image's",
        {
            "OPENAI_API_KEY": "img",
            "ANTHROPIC_BASE_URL": "http://evil",
            "GEMINI_API_KEY": "img",
            "HARNESS_WORKSPACE": "/evil",
            "HARNESS_AGENT_EXEC": "/evil",
        },
        [],
        {"HARNESS_WORKSPACE": "/ws"},
        {"HARNESS_WORKSPACE": "/ws"},
        ("OPENAI_API_KEY", "ANTHROPIC_BASE_URL", "GEMINI_API_KEY", "HARNESS_AGENT_EXEC"),
    ),
    (
        "loader injection is withheld, library and module paths pass",
        {"LD_PRELOAD": "/x.so", "LD_AUDIT": "/a.so", "LD_LIBRARY_PATH": "/l", "PYTHONPATH": "/p"},
        [],
        {},
        {"LD_LIBRARY_PATH": "/l", "PYTHONPATH": "/p"},
        ("LD_PRELOAD", "LD_AUDIT"),
    ),
    (
        "relative PATH entries of the image are dropped",
        {"PATH": ".::bin:/opt/tool/bin:/usr/bin"},
        [],
        {},
        {"PATH": "/opt/tool/bin:/usr/bin"},
        (),
    ),
    (
        "an image PATH of relative entries only leaves the fixed PATH",
        {"PATH": ".:bin"},
        [],
        {},
        {"PATH": FIXED_PATH},
        (),
    ),
    (
        "the task's tables win over the image, in order",
        {"FOO": "image", "BAR": "image", "BAZ": "image"},
        [{"FOO": "compose", "BAR": "compose"}, {"FOO": "environment"}, {"BAZ": "verifier"}],
        {},
        {"FOO": "environment", "BAR": "compose", "BAZ": "verifier"},
        (),
    ),
    (
        "ours win over the task and the image",
        {"DEBIAN_FRONTEND": "dialog", "NO_COLOR": "0"},
        [{"NO_COLOR": "task", "HARNESS_TRIAL_ID": "task"}],
        {"DEBIAN_FRONTEND": "noninteractive", "HARNESS_TRIAL_ID": "t1"},
        {"DEBIAN_FRONTEND": "noninteractive", "NO_COLOR": "task", "HARNESS_TRIAL_ID": "t1"},
        (),
    ),
    (
        "a PATH of ours goes in front of the image's",
        {"PATH": "/opt/tool/bin:/usr/bin"},
        [],
        {"PATH": "/opt/agent/bin"},
        {"PATH": "/opt/agent/bin:/opt/tool/bin:/usr/bin"},
        (),
    ),
    (
        "a PATH of ours goes in front of the task's",
        {"PATH": "/opt/tool/bin"},
        [{"PATH": "/task/bin:/usr/bin"}],
        {"PATH": "/opt/agent/bin"},
        {"PATH": "/opt/agent/bin:/task/bin:/usr/bin"},
        (),
    ),
]


@pytest.mark.parametrize(
    ("image", "layers", "ours", "expected", "absent"),
    [case[1:] for case in CASES],
    ids=[case[0] for case in CASES],
)
def test_merge_rule(
    image: dict[str, str],
    layers: list[dict[str, str]],
    ours: dict[str, str],
    expected: dict[str, str],
    absent: tuple[str, ...],
) -> None:
    env = merge_phase_env(BASE, image_env(ImageConfig(env=image)), layers, ours)
    assert {name: env.get(name) for name in expected} == expected
    assert not set(absent) & set(env)
    # Whatever the image says, the phase's HOME vars are ours (unless the task sets them).
    if not any("HOME" in layer for layer in layers):
        assert env["HOME"] == "/t/home" and env["TMPDIR"] == "/t/home/tmp"


def test_withheld_names_and_record_are_bounded() -> None:
    env = {f"V{i:03}": "x" for i in range(RECORDED_NAMES + 5)}
    env.update({"HOME": "/root", "OPENAI_API_KEY": "k", "LD_PRELOAD": "/x.so"})
    found = image_env(ImageConfig(env=env))
    assert set(found.withheld) == {"HOME", "OPENAI_API_KEY", "LD_PRELOAD"}
    described = found.describe()
    assert len(described["applied"]) == RECORDED_NAMES
    assert described["withheld"] == ["HOME", "LD_PRELOAD", "OPENAI_API_KEY"]
    assert described["unlisted"] == 5
    assert "k" not in str(described) and "/x.so" not in str(described)  # names only


def test_engine_config_parsing() -> None:
    config = ImageConfig.from_engine(
        {
            "Env": ["FOO=a=b", "EMPTY=", "NOEQ", "=x", "FOO2=1", "FOO2=2"],
            "WorkingDir": "/",
            "User": "",
        }
    )
    assert dict(config.env) == {"FOO": "a=b", "EMPTY": "", "FOO2": "2"}
    assert config.workdir is None and config.user is None
    assert ImageConfig.from_engine({"WorkingDir": "/srv/app", "User": "app"}) == ImageConfig(
        workdir="/srv/app", user="app"
    )
    assert ImageConfig.from_engine(None) == ImageConfig()


class _ImageSandbox(FakeSandbox):
    """A fake sandbox whose image declares ``ENV`` lines."""

    def __init__(self, env: Mapping[str, str]) -> None:
        super().__init__(SandboxSpec(trial_id="t"))
        self.image = ImageConfig(env=env, workdir="/srv/app")

    def image_config(self) -> ImageConfig | None:
        return self.image


def test_every_phase_gets_the_image_env(make_task: Callable[..., Task]) -> None:
    task = make_task()
    sandbox = _ImageSandbox({"FOO": "x", "PATH": "/opt/tool/bin:/usr/bin", "HOME": "/root"})
    agent = agent_env(sandbox, task, "t1", {"HARNESS_INSTRUCTION_FILE": "/i"})
    grader = grader_env(sandbox, task, "t1")
    for env in (agent, grader):
        assert env["FOO"] == "x" and env["PATH"] == "/opt/tool/bin:/usr/bin"
    # The verifier's Pythons load the harness's sitecustomize (sandbox/verifier_python.py).
    assert grader["PYTHONPATH"] == TOOLS_SITE and "PYTHONPATH" not in agent
    assert agent["HOME"] == sandbox.paths.home
    assert grader["HOME"] == sandbox.paths.grader_home
    assert image_env_record(sandbox) == {"applied": ["FOO", "PATH"], "withheld": ["HOME"]}
    assert image_env_record(FakeSandbox(SandboxSpec(trial_id="t"))) is None


def test_the_harness_site_dir_goes_in_front_of_a_tasks_pythonpath() -> None:
    """The task's (or image's) ``PYTHONPATH`` stays, behind the harness's site dir."""
    merged = merge_phase_env(
        {"PATH": FIXED_PATH},
        ImageEnv({"PYTHONPATH": "/image/lib"}, ()),
        ({"PYTHONPATH": "/task/lib"},),
        {"PYTHONPATH": TOOLS_SITE},
    )
    assert merged["PYTHONPATH"] == f"{TOOLS_SITE}:/task/lib"
    alone = merge_phase_env({"PATH": FIXED_PATH}, ImageEnv({}, ()), (), {"PYTHONPATH": TOOLS_SITE})
    assert alone["PYTHONPATH"] == TOOLS_SITE
