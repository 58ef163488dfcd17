"""The tampering classifier and what a phase's root changes become in the record and evidence.

Every change to the image root is tampering but under the reviewed ``NOT_READ`` and the
task's expected ones; the reviewed lists give the reason.
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import cast

import pytest

from harness.config import RunConfig
from harness.errors import EXIT_OK, EXIT_TRIAL_ERRORS
from harness.records import TrialStatus
from harness.records.layout import ROOT_CHANGES_FILENAME
from harness.records.metrics import summarize
from harness.records.model import AgentRef, SandboxRef, TaskRef, TrialRecord, tampered_verdict
from harness.runner.execute import exit_code
from harness.tasks.model import TaskConfig
from harness.trial.tampering import (
    MAX_TAMPERING_EVENTS,
    MAX_TAMPERING_GROUPS,
    PathPatterns,
    RootChangeLog,
    fresh_changes,
    image_path_dirs,
    passwd_home,
    specific_reason,
    summary,
    tampering_events,
    tampering_reason,
    write_changes,
)
from harness.trial.tampering_paths import GENERIC_REASON, HOME_REASON
from sandbox.backend import Sandbox
from sandbox.image_config import ImageConfig
from sandbox.root_changes import RootChange, RootChanges

#: path -> whether a verifier in the same container would execute or import it.
CASES = [
    ("/usr/bin/python3", True),
    ("/usr/bin/python3.11", True),
    ("/bin/sh", True),
    ("/bin/bash", True),
    ("/usr/local/bin/pytest", True),
    ("/usr/local/bin/uv", True),
    ("/usr/bin/curl", True),
    ("/sbin/ldconfig", True),
    ("/usr/sbin/useradd", True),
    ("/usr/lib/python3.11/json/__init__.py", True),
    ("/usr/local/lib/python3.12/site-packages/pytest/__init__.py", True),
    ("/usr/lib/python3/dist-packages/yaml/__init__.py", True),
    ("/opt/venv/lib/python3.12/site-packages/evil.pth", True),
    ("/srv/app/.venv/lib/python3.12/site-packages/x.py", True),
    ("/srv/anything/sitecustomize.py", True),
    ("/srv/conftest.py", True),
    ("/etc/ld.so.preload", True),
    ("/etc/ld.so.conf", True),
    ("/etc/ld.so.conf.d/evil.conf", True),
    ("/etc/profile", True),
    ("/etc/profile.d/zz.sh", True),
    ("/etc/bash.bashrc", True),
    ("/etc/environment", True),
    ("/root/.bashrc", True),
    ("/root/.profile", True),
    ("/root/.local/bin/pytest", True),
    ("/lib/x86_64-linux-gnu/libc.so.6", True),
    ("/lib64/ld-linux-x86-64.so.2", True),
    ("/usr/bin/../bin/python3", True),
    # Every change under /etc, the package manager's state, the interpreters' module dirs,
    # git's templates and the verifier's HOME (the reviewed default, tampering_paths.py).
    ("/etc/hostname", True),
    ("/etc/passwd", True),
    ("/etc/nsswitch.conf", True),
    ("/etc/ld.so.cache", True),
    ("/etc/gitconfig", True),
    ("/etc/ssl/openssl.cnf", True),
    ("/etc/apt/apt.conf.d/99x", True),
    ("/etc/dpkg/dpkg.cfg.d/x", True),
    ("/etc/alternatives/python3", True),
    ("/etc/python3.11/sitecustomize.py", True),
    ("/etc/sudoers.d/x", True),
    ("/etc/nginx/nginx.conf", True),
    ("/usr/share/perl5/Debian/AdduserCommon.pm", True),
    ("/usr/lib/x86_64-linux-gnu/perl5/5.36/Foo.pm", True),
    ("/usr/share/git-core/templates/hooks/post-checkout", True),
    ("/var/lib/dpkg/status", True),
    ("/var/lib/dpkg/info/curl.postinst", True),
    ("/var/lib/apt/lists/deb.debian.org_dists_bookworm_InRelease", True),
    ("/var/cache/apt/archives/curl.deb", True),
    ("/usr/pyvenv.cfg", True),
    ("/usr/local/pyvenv.cfg", True),
    ("/root/projects/readme.md", True),
    ("/root/.config/git/config", True),
    ("/var/lib/gems/3.1.0/gems/x/lib/x.rb", True),
    ("/usr/share/nodejs/x/index.js", True),
    # The rest of the root too: no list of what tools read is complete.
    ("/usr/share/debconf/confmodule", True),
    ("/opt/tool/lib/impl.sh", True),
    ("/usr/local/go/src/testing/x.go", True),
    ("/usr/include/stdio.h", True),
    ("/usr/share/misc/magic", True),
    ("/var/spool/cron/crontabs/root", True),
    ("/srv/data/input.csv", True),
    ("/home/user/notes.txt", True),
    ("/usr/share/doc/curl/README", True),
    ("/var/cache/man/index.db", True),
    ("/etcetera/x", True),
    ("/var/logx", True),
    ("/var/log/../lib/dpkg/status", True),
    # The reviewed exceptions: read as code or configuration by no tool.
    ("/var/log/apt/history.log", False),
    ("/var/log/dpkg.log", False),
    ("/var/log", False),
    # ... unless python acts on it wherever it is.
    ("/var/log/x/conftest.py", True),
    ("/var/log/site-packages/x.py", True),
]


@pytest.mark.parametrize(("path", "tampering"), CASES)
def test_classifier(path: str, tampering: bool) -> None:
    assert (tampering_reason(path) is not None) is tampering, tampering_reason(path)


def test_the_images_own_path_counts() -> None:
    dirs = image_path_dirs(["FOO=1", "PATH=/opt/tool/bin:/usr/bin:relative"])
    assert dirs == ("/opt/tool/bin", "/usr/bin")
    assert tampering_reason("/opt/tool/bin/mytool", dirs) == "an executable on the image's PATH"
    assert tampering_reason("/opt/tool/bin/mytool") == GENERIC_REASON
    assert specific_reason("/opt/tool/share/doc", dirs) is None


def _changes(paths: list[str], *, truncated: bool = False) -> RootChanges:
    return RootChanges(
        changes=tuple(RootChange(path=p, kind="modified", mode=0o755, size=3) for p in paths),
        truncated=truncated,
        total=len(paths) + (5 if truncated else 0),
    )


def test_events_summary_and_evidence(tmp_path: Path) -> None:
    changes = _changes(["/srv/data.csv", "/usr/bin/python3", "/usr/local/bin/pytest"])
    events = tampering_events(changes, step="one")
    assert [e["path"] for e in events] == [
        "/srv/data.csv",
        "/usr/bin/python3",
        "/usr/local/bin/pytest",
    ]
    assert all(e["type"] == "tampering" and e["step"] == "one" for e in events)
    assert GENERIC_REASON in events[0]["detail"] and "on PATH" in events[1]["detail"]
    entry = summary(changes, 3)
    assert entry["total"] == 3 and entry["modified"] == 3 and entry["tampering"] == 3
    write_changes(tmp_path, changes, "one")
    write_changes(tmp_path, _changes(["/bin/sh"], truncated=True), "two")
    lines = [json.loads(x) for x in (tmp_path / ROOT_CHANGES_FILENAME).read_text().splitlines()]
    assert [x.get("path") for x in lines] == [
        "/srv/data.csv",
        "/usr/bin/python3",
        "/usr/local/bin/pytest",
        "/bin/sh",
        None,
    ]
    assert lines[-1] == {"truncated": True, "total": 6}
    assert lines[0]["mode"] == "0o755" and lines[0]["step"] == "one"


def test_events_are_bounded() -> None:
    paths = [f"/usr/bin/tool{i}" for i in range(MAX_TAMPERING_EVENTS + 7)]
    events = tampering_events(_changes(paths))
    assert len(events) == MAX_TAMPERING_EVENTS + 1
    assert "7 more" in events[-1]["detail"] and "path" not in events[-1]
    assert events[-1]["dir"] == "/usr" and events[-1]["count"] == 7


def test_an_install_of_thousands_of_files_stays_a_few_events() -> None:
    """Files before the dirs made to hold them; the rest counted per top dir, bounded."""
    dirs = [RootChange(f"/aaa/d{i}", "added", "dir") for i in range(10)]
    files = [RootChange(f"/usr/share/x/f{i:05}", "added") for i in range(5000)]
    tops = [RootChange(f"/zz{i:03}/f", "added") for i in range(MAX_TAMPERING_GROUPS + 5)]
    hook = RootChange("/usr/share/debconf/confmodule", "modified")
    listing = RootChanges(tuple(sorted([*dirs, *files, *tops, hook], key=lambda c: c.path)))
    events = tampering_events(listing)
    named = [e for e in events if "path" in e]
    assert len(named) == MAX_TAMPERING_EVENTS
    assert "/usr/share/debconf/confmodule" in [e["path"] for e in named]
    assert not [e for e in named if e["path"].startswith("/aaa/")]  # dirs come last
    more = {e.get("dir"): e["count"] for e in events if e["kind"] == "more"}
    assert len(more) == MAX_TAMPERING_GROUPS + 1  # the groups, then what is left
    assert more["/usr"] == 5000 + 1 - MAX_TAMPERING_EVENTS and more["/zz000"] == 1
    assert more[None] == 6 + 10  # the tops past the groups, and the dirs
    named_count = len(named) + sum(more.values())
    assert named_count == len(listing.changes)


def test_the_summary_counts_tampered_trials() -> None:
    def record(index: int, events: list[dict[str, object]]) -> TrialRecord:
        now = datetime.now(UTC)
        return TrialRecord(
            id=f"t{index}",
            task=TaskRef(name="t", key="t", hash="h", path="/t"),
            agent=AgentRef(name="command"),
            sandbox=SandboxRef(backend="docker"),
            status=TrialStatus.COMPLETED,
            ok=True,
            reward=1.0,
            started_at=now,
            finished_at=now,
            events=events,
        )

    hit: dict[str, object] = {"type": "tampering", "path": "/usr/bin/python3", "kind": "modified"}
    clean = summarize([record(0, [])], planned=1)
    assert "tampering" not in clean.model_dump()
    found = summarize([record(0, [hit, hit]), record(1, [])], planned=2).model_dump()
    assert found["tampering"] == {"trials": 1, "events": 2, "verdicts": 0}
    assert found["planned"] == 2
    forged = record(0, [hit]).model_copy(update={"tampered_verdict": True})
    assert tampered_verdict(forged) and not tampered_verdict(record(1, [hit]))
    found = summarize([forged, record(1, [])], planned=2).model_dump()
    assert found["tampering"] == {"trials": 1, "events": 1, "verdicts": 1}


def test_each_phase_records_only_its_own_share(tmp_path: Path) -> None:
    """A sandbox lists every phase's changes so far: a phase's share is what is new."""

    class Listing:
        """What the trial asks of a sandbox here: its listing so far, its PATH."""

        listing = RootChanges()

        def root_changes(self) -> RootChanges | None:
            return self.listing

        def environment_env(self) -> dict[str, str]:
            return {"PATH": "/opt/tool/bin:/usr/bin"}

        def image_config(self) -> None:
            return None

        def read_file(self, path: str, *, max_bytes: int) -> tuple[bytes | None, None]:
            return None, None

        spec = SimpleNamespace(verifier_user=None)

    events: list[dict[str, object]] = []
    log = RootChangeLog(tmp_path, events)
    sandbox = cast(Sandbox, Listing())
    python = RootChange("/usr/bin/python3", "modified", mode=0o755, size=3)
    tool = RootChange("/opt/tool/bin/t", "added", mode=0o755, size=1)
    Listing.listing = RootChanges((python,), total=1)
    log.after_agent(sandbox, "one")
    Listing.listing = RootChanges((RootChange("/var/lib/apt/x", "added"), python), total=2)
    log.after_grader(sandbox)  # the verifier's install
    Listing.listing = RootChanges((RootChange("/var/lib/apt/x", "added"), python, tool), total=3)
    log.after_agent(sandbox, "two")
    assert [s["paths"] for s in log.summaries] == [["/usr/bin/python3"], ["/opt/tool/bin/t"]]
    assert [(e["path"], e["step"]) for e in events] == [
        ("/usr/bin/python3", "one"),
        ("/opt/tool/bin/t", "two"),
    ]
    assert fresh_changes(Listing.listing, {}).total == 3


class _Root:
    """A sandbox as the root change log sees it: a listing, an image, its config files."""

    def __init__(
        self,
        changes: list[RootChange],
        passwd: bytes,
        user: str | None,
        *,
        files: dict[str, bytes] | None = None,
        env: dict[str, str] | None = None,
        image: ImageConfig | None = None,
    ) -> None:
        self.listing = RootChanges(tuple(changes), total=len(changes))
        self.files = {"/etc/passwd": passwd, **(files or {})}
        self.env = env or {}
        self.image = image
        self.spec = SimpleNamespace(verifier_user=user)

    def root_changes(self) -> RootChanges:
        return self.listing

    def environment_env(self) -> dict[str, str]:
        return self.env

    def image_config(self) -> ImageConfig | None:
        return self.image

    def read_file(self, path: str, *, max_bytes: int) -> tuple[bytes | None, None]:
        data = self.files.get(path)
        return (None if data is None else data[:max_bytes]), None

    def copy_out(
        self, path: str, dest: Path, *, max_file_bytes: int, max_total_bytes: int
    ) -> list[object]:
        for name, data in self.files.items():
            if name.rsplit("/", 1)[0] == path:
                dest.mkdir(parents=True, exist_ok=True)
                (dest / name.rsplit("/", 1)[1]).write_bytes(data[:max_file_bytes])
        return []


PASSWD = b"root:x:0:0:root:/root:/bin/bash\napp:x:1000:1000::/home/app:/bin/sh\n"


def test_passwd_home_reads_the_agents_file_as_text() -> None:
    assert passwd_home(PASSWD, "root") == "/root"
    assert passwd_home(PASSWD, "1000") == "/home/app"
    assert passwd_home(PASSWD, "nobody") is None
    assert passwd_home(b"root:x:0:0::relative:/bin/sh\n", "root") is None
    assert passwd_home(b"root:x:0:0::/:/bin/sh\n", "root") is None
    assert passwd_home(b"\xff\xfe:garbage\nroot:x:0:0::/srv/h/../r:/bin/sh", "root") == "/srv/r"


def test_the_verifiers_home_is_where_passwd_points_after_the_agent(tmp_path: Path) -> None:
    """A root agent that moves root's HOME in /etc/passwd: the new HOME is watched too."""
    moved = PASSWD.replace(b":/root:", b":/srv/home:")
    changes = [
        RootChange("/srv/home/.bashrc", "added"),
        RootChange("/home/app/.profile", "added"),
        RootChange("/srv/data.csv", "added"),
    ]
    events: list[dict[str, object]] = []
    RootChangeLog(tmp_path, events).after_agent(cast(Sandbox, _Root(changes, moved, None)), None)
    homes = [e["path"] for e in events if HOME_REASON in str(e["detail"])]
    assert homes == ["/srv/home/.bashrc"] and len(events) == 3
    events = []
    sandbox = cast(Sandbox, _Root(changes, PASSWD, "app"))
    RootChangeLog(tmp_path, events).after_agent(sandbox, None)
    assert [e["path"] for e in events if HOME_REASON in str(e["detail"])] == ["/home/app/.profile"]


def test_expected_root_changes_are_not_tampering(tmp_path: Path) -> None:
    changes = [
        RootChange("/etc/nginx/nginx.conf", "modified"),
        RootChange("/etc/nginxx", "added"),
        RootChange("/usr/lib/python3/dist-packages/flask/__init__.py", "added"),
        RootChange("/usr/bin/python3", "modified"),
    ]
    events: list[dict[str, object]] = []
    expected = ["/etc/nginx", "/usr/lib/python3/dist-packages/*"]
    log = RootChangeLog(tmp_path, events, expected)
    log.after_agent(cast(Sandbox, _Root(changes, PASSWD, None)), None)
    assert [e["path"] for e in events] == ["/etc/nginxx", "/usr/bin/python3"]
    assert log.summaries[0]["tampering"] == 2


def test_a_verdict_after_tampering_is_marked(tmp_path: Path) -> None:
    events: list[dict[str, object]] = []
    log = RootChangeLog(tmp_path, events)
    clean = _Root([RootChange("/var/log/x.log", "added")], PASSWD, None)
    log.after_agent(cast(Sandbox, clean), "one")
    log.after_verifier(cast(Sandbox, clean))
    assert not log.tampered_verdict
    hook = _Root([RootChange("/etc/apt/apt.conf.d/99x", "added")], PASSWD, None)
    log.after_agent(cast(Sandbox, hook), "two")
    assert log.tampered and not log.tampered_verdict
    log.after_verifier(cast(Sandbox, hook))
    assert log.tampered_verdict


def test_a_listing_cut_short_counts_as_tampering(tmp_path: Path) -> None:
    """Changes past the bound are unseen: an agent could bury its hook behind 10,000 files."""
    events: list[dict[str, object]] = []
    log = RootChangeLog(tmp_path, events)
    cut = _Root([RootChange("/var/log/0", "added")], PASSWD, None)
    cut.listing = RootChanges(cut.listing.changes, truncated=True, total=10_001)
    log.after_agent(cast(Sandbox, cut), None)
    assert [e["kind"] for e in events] == ["unlisted"] and log.tampered


def test_the_most_specific_pattern_gives_the_reason() -> None:
    patterns = PathPatterns([("/etc", "any"), ("/etc/apt", "apt"), ("/etc/python3*", "py")])
    assert patterns.match("/etc/apt/apt.conf.d/99x") == "apt"
    assert patterns.match("/etc/aptx") == "any"
    assert patterns.match("/etc/python3.11/sitecustomize.py") == "py"
    assert patterns.match("/etc") == "any" and patterns.match("/etcx") is None
    assert patterns.match("/") is None
    assert tampering_reason("/etc/apt/apt.conf.d/99x") == (
        "apt's config: apt.conf.d hooks (APT::Update::Pre-Invoke) run as root"
    )


def test_fail_on_tampering_fails_a_run_with_a_tampered_verdict() -> None:
    now = datetime.now(UTC)
    clean = TrialRecord(
        id="t0",
        task=TaskRef(name="t", key="t", hash="h", path="/t"),
        agent=AgentRef(name="command"),
        sandbox=SandboxRef(backend="docker"),
        status=TrialStatus.COMPLETED,
        ok=True,
        reward=1.0,
        started_at=now,
        finished_at=now,
    )
    forged = clean.model_copy(update={"id": "t1", "tampered_verdict": True})
    config = RunConfig.model_validate({"tasks": {"paths": ["t"]}, "fail_on_tampering": True})
    lenient = RunConfig.model_validate({"tasks": {"paths": ["t"]}})
    assert not lenient.fail_on_tampering
    records = [clean, forged]
    summary = summarize(records)
    assert exit_code(config, records, summary, False) == EXIT_TRIAL_ERRORS
    assert exit_code(lenient, records, summary, False) == EXIT_OK
    assert exit_code(config, [clean], summarize([clean]), False) == EXIT_OK


@pytest.mark.parametrize("path", ["etc/nginx", "/", "/etc/../root", "/etc/./x", "/a\x00b", ""])
def test_expected_root_changes_are_absolute_paths_below_the_root(path: str) -> None:
    with pytest.raises(ValueError, match="expected_root_changes"):
        TaskConfig.model_validate({"harness": {"expected_root_changes": [path]}})


def test_the_harness_table_leaves_the_task_hash_alone_while_unset() -> None:
    plain = TaskConfig.model_validate({"task": {"name": "x"}})
    assert "harness" not in plain.hash_dump()
    assert plain.unknown_keys() == []
    declared = TaskConfig.model_validate(
        {"task": {"name": "x"}, "harness": {"expected_root_changes": ["/etc/nginx"]}}
    )
    assert declared.harness.expected_root_changes == ["/etc/nginx"]
    assert declared.hash_dump()["harness"] == {"expected_root_changes": ["/etc/nginx"]}
    assert declared.normalized_json() != plain.normalized_json()


def test_the_images_search_paths_and_loader_config_are_watched(tmp_path: Path) -> None:
    """Dirs an image adds to the loader's or an interpreter's path are read by a verifier."""
    files = {
        "/etc/ld.so.conf": b"# comment\ninclude /etc/ld.so.conf.d/*.conf\n/opt/direct\n",
        "/etc/ld.so.conf.d/cuda.conf": b"/opt/cuda/lib64  # the driver\nrelative/lib\n/\n",
        "/etc/ld.so.conf.d/README": b"/opt/not-a-conf\n",
    }
    # The image's ENV, under the environment's own (compose's) where both say.
    image = ImageConfig(env={"PYTHONPATH": "/opt/pylib::relative", "PERL5LIB": "/opt/old"})
    env = {"PERL5LIB": "/opt/perl", "NODE_PATH": "/"}
    changes = [
        RootChange("/opt/cuda/lib64/libcuda.so.1", "modified"),
        RootChange("/opt/direct/libx.so", "added"),
        RootChange("/opt/pylib/helpers.py", "added"),
        RootChange("/opt/perl/Test/More.pm", "added"),
        RootChange("/opt/not-a-conf/x", "added"),
        RootChange("/opt/old/x.pm", "added"),
        RootChange("/opt/data/x.csv", "added"),
    ]
    events: list[dict[str, object]] = []
    sandbox = _Root(changes, PASSWD, None, files=files, env=env, image=image)
    RootChangeLog(tmp_path, events).after_agent(cast(Sandbox, sandbox), None)
    assert {e["path"]: e["detail"] for e in events if GENERIC_REASON not in str(e["detail"])} == {
        "/opt/cuda/lib64/libcuda.so.1": "the agent modified a dir of the dynamic loader's "
        "search path (ld.so.conf): a verifier in this container reads it",
        "/opt/direct/libx.so": "the agent added a dir of the dynamic loader's search path "
        "(ld.so.conf): a verifier in this container reads it",
        "/opt/pylib/helpers.py": "the agent added a dir on the image's PYTHONPATH (python's "
        "import path): a verifier in this container reads it",
        "/opt/perl/Test/More.pm": "the agent added a dir on the image's PERL5LIB (perl's "
        "@INC): a verifier in this container reads it",
    }


def test_the_bind_mounted_name_files_are_compared_across_the_agent_phase(tmp_path: Path) -> None:
    """/etc/hosts and /etc/resolv.conf are outside the layer the scan lists."""
    events: list[dict[str, object]] = []
    log = RootChangeLog(tmp_path, events)
    files = {"/etc/hosts": b"127.0.0.1 localhost\n", "/etc/resolv.conf": b"nameserver 1.1.1.1\n"}
    sandbox = _Root([], PASSWD, None, files=files)
    log.before_agent(cast(Sandbox, sandbox))
    log.after_agent(cast(Sandbox, sandbox), "one")  # unchanged: nothing
    assert events == [] and log.summaries == []
    log.before_agent(cast(Sandbox, sandbox))
    sandbox.files["/etc/hosts"] += b"10.9.9.9 deb.debian.org\n"
    sandbox.files["/etc/hostname"] = b"x\n"
    log.after_agent(cast(Sandbox, sandbox), "two")
    assert [(e["path"], e["kind"]) for e in events] == [
        ("/etc/hostname", "added"),
        ("/etc/hosts", "modified"),
    ]
    assert "every lookup reads first" in str(events[1]["detail"])
    assert log.summaries[0]["tampering"] == 2 and log.tampered
    lines = (tmp_path / ROOT_CHANGES_FILENAME).read_text()
    assert '"/etc/hosts"' in lines
    # The next phase compares with what the files hold before it.
    log.before_agent(cast(Sandbox, sandbox))
    log.after_agent(cast(Sandbox, sandbox), "three")
    assert len(events) == 2
