"""Nothing in ``sandbox/inside/`` reaches NSS, locales or a library lookup of the sandbox.

The in-sandbox code runs as root in the sandbox (the supervisor is a container's pid 1)
while a root agent can write the container's root: its ``/etc/nsswitch.conf`` names the
``libnss_*.so.2`` modules glibc ``dlopen``s into whoever looks a user, group or host up.
So the supervisor and every harness step before a phase's ``execve`` use numeric ids and
:mod:`sandbox.inside.passwd`. This test reads the source (ast) and fails on any import or
call that goes through NSS, a locale or ``ctypes.util`` (which runs ``ldconfig``/``gcc``),
and on a subprocess anywhere but the agent loop (a phase's own program, whose tools are
the agent's commands).
"""

from __future__ import annotations

import ast
from pathlib import Path

from sandbox.backend import INSIDE_DIR

#: Modules whose use looks users, groups or hosts up through NSS, or loads locale files.
FORBIDDEN_MODULES = {
    "pwd",
    "grp",
    "spwd",
    "getpass",
    "nis",
    "crypt",
    "locale",
    "tarfile",
    "ctypes.util",
}
#: Names that go through NSS (or a library search) whatever object they hang on.
FORBIDDEN_NAMES = {
    "getpwuid",
    "getpwnam",
    "getpwall",
    "getpwent",
    "getspnam",
    "getgrgid",
    "getgrnam",
    "getgrall",
    "getgrouplist",
    "initgroups",
    "getlogin",
    "expanduser",
    "getaddrinfo",
    "getnameinfo",
    "gethostbyname",
    "gethostbyname_ex",
    "gethostbyaddr",
    "getfqdn",
    "getservbyname",
    "getservbyport",
    "getprotobyname",
    "create_connection",
    "setlocale",
    "find_library",
    "dlopen",
}
#: ``module.name`` pairs forbidden though the module itself is fine.
FORBIDDEN_ATTRS = {("shutil", "chown"), ("Path", "home")}
#: The agent loop is a phase's own program (it runs after the drop, as the agent): its
#: tools run as subprocesses and its HTTP client is the agent's.
SUBPROCESS_ALLOWED = {"agent_loop"}


def _modules() -> list[Path]:
    files = sorted(INSIDE_DIR.glob("*.py"))
    assert len(files) > 5, f"no in-sandbox modules found in {INSIDE_DIR}"
    return files


def _violations(path: Path) -> list[str]:  # noqa: C901
    tree = ast.parse(path.read_text(), filename=str(path))
    found: list[str] = []

    def bad(node: ast.AST, what: str) -> None:
        found.append(f"{path.name}:{getattr(node, 'lineno', '?')}: {what}")

    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name in FORBIDDEN_MODULES or alias.name.split(".")[0] in {
                    m for m in FORBIDDEN_MODULES if "." not in m
                }:
                    bad(node, f"import {alias.name}")
                if alias.name == "subprocess" and path.stem not in SUBPROCESS_ALLOWED:
                    bad(node, "import subprocess")
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            for alias in node.names:
                full = f"{module}.{alias.name}" if module else alias.name
                if (
                    module in FORBIDDEN_MODULES
                    or full in FORBIDDEN_MODULES
                    or module.split(".")[0] in {"pwd", "grp", "getpass", "locale", "tarfile"}
                    or alias.name in FORBIDDEN_NAMES
                    or (module, alias.name) in FORBIDDEN_ATTRS
                ):
                    bad(node, f"from {module} import {alias.name}")
                if module == "subprocess" and path.stem not in SUBPROCESS_ALLOWED:
                    bad(node, "from subprocess import ...")
        elif isinstance(node, ast.Attribute):
            if node.attr in FORBIDDEN_NAMES:
                bad(node, f"... .{node.attr}")
            if isinstance(node.value, ast.Name) and (node.value.id, node.attr) in FORBIDDEN_ATTRS:
                bad(node, f"{node.value.id}.{node.attr}")
        elif isinstance(node, ast.Name) and node.id in FORBIDDEN_NAMES:
            bad(node, node.id)
        elif isinstance(node, ast.Constant) and node.value in FORBIDDEN_NAMES:
            bad(node, f"the string {node.value!r} (getattr, ctypes)")
    return found


def test_no_in_sandbox_module_goes_through_nss_or_a_locale() -> None:
    found = [v for path in _modules() for v in _violations(path)]
    assert not found, (
        "sandbox/inside/ runs as root in a sandbox whose root a root agent writes: glibc's "
        "NSS (users, groups, hosts), locales and library searches load code the container's "
        "/etc names. Offending uses:\n  "
        + "\n  ".join(found)
        + "\nFix: use numeric ids and sandbox/inside/passwd.py (our own parse of /etc/passwd); "
        "expand `~` from $HOME yourself; connect to numeric addresses."
    )


def test_the_check_sees_what_it_forbids(tmp_path: Path) -> None:
    """The scanner is not vacuous: each forbidden shape is reported."""
    sample = tmp_path / "sample.py"
    sample.write_text(
        "import pwd\nimport grp as g\nfrom getpass import getuser\nimport os, socket, shutil\n"
        "import subprocess\nimport ctypes.util\n"
        "os.path.expanduser('~')\nsocket.getaddrinfo('h', 1)\nos.initgroups('a', 1)\n"
        "shutil.chown('f', user='x')\ngetattr(os, 'getlogin')\nLIBC.getpwnam(b'x')\n"
        "Path.home()\n"
    )
    found = _violations(sample)
    for needle in (
        "import pwd",
        "import grp",
        "from getpass import getuser",
        "import subprocess",
        "import ctypes.util",
        ".expanduser",
        ".getaddrinfo",
        ".initgroups",
        "shutil.chown",
        "'getlogin'",
        ".getpwnam",
        "Path.home",
    ):
        assert any(needle in v for v in found), (needle, found)
