"""The reviewed lists: where a change to an image's root steers a verifier, and where it cannot.

A verifier that runs in the agent's container (``[verifier].environment_mode = "shared"``,
Harbor's default) runs the image's ``bash``, ``python3``, ``pytest``, ``apt-get``, ``git``,
``curl`` as root. Whatever those programs execute, load, import, source or read as
configuration is part of the verdict, and a root agent can rewrite all of it; no list of
such places is ever complete (``apt-get install`` sources debconf's ``confmodule`` from
``/usr/share``, a tool on the image's ``PATH`` runs a script of its own ``lib`` dir). So
every change an agent phase makes to the image root is a ``tampering`` event
(:mod:`harness.trial.tampering`), except:

- under :data:`NOT_READ`: the few trees no tool reads as code or configuration, each with
  the reason it is safe;
- what the task declares expected (``[harness].expected_root_changes``, docs/tasks.md).

The other lists give an event its reason: the most specific entry that matches, else
:data:`GENERIC_REASON`. :data:`DEFAULT_TREES` names whole trees (``/etc``, the library dirs,
dpkg's and apt's state) with why a verifier's tools read them; the names, components and
suffixes are what python and pytest act on wherever they are.

Patterns are absolute paths whose components may hold ``*`` (any characters of one
component); a pattern matches the path itself and everything under it.
"""

from __future__ import annotations

#: Trees of the image root a verifier's tools read: (pattern, reason), reviewed one by one.
DEFAULT_TREES: tuple[tuple[str, str], ...] = (
    # Executables a test.sh runs by name.
    ("/bin", "an executable on PATH"),
    ("/sbin", "an executable on PATH"),
    ("/usr/bin", "an executable on PATH"),
    ("/usr/sbin", "an executable on PATH"),
    ("/usr/local/bin", "an executable on PATH"),
    ("/usr/local/sbin", "an executable on PATH"),
    # The dynamic loader's search path and every interpreter's standard library: python's
    # /usr/lib/python3*, perl's /usr/lib/x86_64-linux-gnu/perl*, ruby's and node's global
    # module dirs (/usr/lib/ruby, /usr/lib/node_modules, /usr/local/lib/node_modules).
    ("/lib", "a shared library, the dynamic loader or an interpreter's module"),
    ("/lib32", "a shared library, the dynamic loader or an interpreter's module"),
    ("/lib64", "a shared library, the dynamic loader or an interpreter's module"),
    ("/libx32", "a shared library, the dynamic loader or an interpreter's module"),
    ("/usr/lib", "a shared library, the dynamic loader or an interpreter's module"),
    ("/usr/lib32", "a shared library, the dynamic loader or an interpreter's module"),
    ("/usr/lib64", "a shared library, the dynamic loader or an interpreter's module"),
    ("/usr/libx32", "a shared library, the dynamic loader or an interpreter's module"),
    ("/usr/local/lib", "a shared library or an interpreter's module (pip, npm -g, gem)"),
    ("/usr/libexec", "a helper a tool executes (git's commands, apt's methods)"),
    ("/usr/local/libexec", "a helper a tool executes"),
    # Interpreters' module dirs outside the library dirs.
    ("/usr/share/perl5", "perl's @INC (apt's and dpkg's own perl modules live here)"),
    ("/usr/share/perl", "perl's @INC"),
    ("/usr/local/share/perl", "perl's @INC"),
    ("/usr/share/python3", "Debian's python hooks (py3compile, run by package installs)"),
    ("/usr/share/nodejs", "node's global module dir on Debian"),
    ("/usr/share/rubygems-integration", "ruby's gem path on Debian"),
    ("/var/lib/gems", "ruby's gem path on Debian"),
    ("/opt/conda", "a Python environment"),
    ("/opt/venv", "a Python environment"),
    # Tools' own data that is code.
    ("/usr/share/git-core", "git's templates (hooks copied into every new repository)"),
    # The package manager a test.sh calls (`apt-get install curl`): it runs as root.
    ("/var/lib/dpkg", "dpkg's database: maintainer scripts, diversions, triggers an apt-get runs"),
    ("/var/lib/apt", "apt's package lists: what an apt-get install takes as genuine"),
    ("/var/cache/apt", "apt's downloaded packages: installed as they are when the lists match"),
    ("/var/cache/debconf", "debconf's answers, acted on by packages' maintainer scripts"),
    # Configuration: every file under /etc is read by some tool a verifier may run.
    ("/etc", "system configuration a verifier's tools read"),
    ("/etc/ld.so.preload", "the dynamic loader's preload list (loaded into every program)"),
    ("/etc/ld.so.cache", "the dynamic loader's cache: which file every library name loads"),
    ("/etc/ld.so.conf", "the dynamic loader's search path"),
    ("/etc/ld.so.conf.d", "the dynamic loader's search path"),
    ("/etc/nsswitch.conf", "name services: the libnss modules every user or host lookup loads"),
    ("/etc/passwd", "users: the verifier's identity and the HOME its own is seeded from"),
    ("/etc/group", "groups: the verifier's identity"),
    ("/etc/profile", "a login shell's startup file"),
    ("/etc/profile.d", "a login shell's startup files"),
    ("/etc/bash.bashrc", "bash's startup file"),
    ("/etc/bashrc", "bash's startup file"),
    ("/etc/environment", "the environment PAM and login shells set"),
    ("/etc/zshenv", "zsh's startup file"),
    ("/etc/zshrc", "zsh's startup file"),
    ("/etc/apt", "apt's config: apt.conf.d hooks (APT::Update::Pre-Invoke) run as root"),
    ("/etc/dpkg", "dpkg's config: dpkg.cfg.d options and hooks run as root"),
    ("/etc/gitconfig", "git's system config (hooksPath, fsmonitor, aliases run commands)"),
    ("/etc/ssl", "openssl's config (engines, providers loaded by every TLS client) and CAs"),
    ("/etc/alternatives", "where python3, java, editor and friends point"),
    ("/etc/python3*", "python's system config (Debian's sitecustomize.py)"),
    ("/etc/pip.conf", "pip's index and options"),
    ("/etc/sudoers", "sudo's rules"),
    ("/etc/sudoers.d", "sudo's rules"),
    # The container's name files: bind mounts the engine writes, outside the image's layers
    # (compared before and after each agent phase: BIND_MOUNTED).
    ("/etc/hosts", "the host names every lookup reads first (where deb.debian.org, pypi.org go)"),
    ("/etc/resolv.conf", "the DNS servers every lookup asks"),
    ("/etc/hostname", "the container's host name"),
    # More code and data that tools run or trust, named for a better reason (the rest of
    # the root counts as well: GENERIC_REASON).
    ("/usr/share/debconf", "debconf's shell library, sourced as root by packages' scripts"),
    ("/usr/share/dpkg", "dpkg's makefiles and tables, read by package builds and installs"),
    ("/usr/share/ca-certificates", "the CAs update-ca-certificates trusts"),
    ("/usr/local/share/ca-certificates", "local CAs update-ca-certificates adds to the trust"),
    ("/usr/share/keyrings", "the keys apt checks package signatures with"),
    ("/usr/include", "C headers every compile includes"),
    ("/usr/local/include", "C headers every compile includes"),
    ("/usr/local/etc", "configuration of tools installed under /usr/local (git's, ...)"),
    ("/var/spool/cron", "crontabs run as their owner"),
    ("/home", "users' HOMEs: dotfiles their shells and tools read"),
    # The HOME the verifier's own is seeded from (root's, by default).
    ("/root", "root's HOME: the verifier's fresh HOME is seeded from its dotfiles"),
)

#: The bind mounts the engine puts on the image's ``/etc`` (never in its writable layer):
#: their content is compared before and after each agent phase.
BIND_MOUNTED: tuple[str, ...] = ("/etc/hosts", "/etc/hostname", "/etc/resolv.conf")

#: Trees of the image root no tool reads as code or configuration: a change there is no
#: ``tampering`` event. (pattern, why it is safe), reviewed one by one; keep it tiny.
NOT_READ: tuple[tuple[str, str], ...] = (
    # Written by apt, dpkg and services, read back by no tool a verifier runs: apt and dpkg
    # keep their state in /var/lib, logrotate's config lives in /etc, and a test that reads
    # a log it did not write reads the agent's output, like any file in the workspace.
    ("/var/log", "logs: written by tools, read as code or configuration by none"),
)

#: Why a change counts when no entry above names its place.
GENERIC_REASON = "the image's root (a verifier in this container may run or read anything there)"

#: Names a verifier's python or pytest reads wherever they are: (name, reason).
DEFAULT_NAMES: tuple[tuple[str, str], ...] = (
    ("conftest.py", "conftest.py (imported by pytest)"),
    ("sitecustomize.py", "sitecustomize.py (imported by every python)"),
    ("usercustomize.py", "usercustomize.py (imported by every python)"),
    ("pytest.ini", "pytest.ini (pytest's config)"),
    ("pyproject.toml", "pyproject.toml (pytest's config)"),
    ("tox.ini", "tox.ini (pytest's config)"),
    ("setup.cfg", "setup.cfg (pytest's config)"),
    ("pyvenv.cfg", "pyvenv.cfg (re-roots the python next to or above it)"),
)

#: A dir name that makes everything under it python's import path, wherever it is.
DEFAULT_COMPONENTS: tuple[tuple[str, str], ...] = (
    ("site-packages", "python's site-packages (imported by the verifier's python)"),
    ("dist-packages", "python's dist-packages (imported by the verifier's python)"),
)

#: File suffixes python acts on wherever its import path reaches.
DEFAULT_SUFFIXES: tuple[tuple[str, str], ...] = (
    (".pth", "a .pth file (its import lines run in every python)"),
)

#: The image's search-path variables (its ``ENV``, which every phase gets): each absolute
#: dir on one is a tree a verifier's loader or interpreter reads, for the reason given.
SEARCH_PATH_VARS: tuple[tuple[str, str], ...] = (
    ("LD_LIBRARY_PATH", "a dir on the image's LD_LIBRARY_PATH (the dynamic loader's path)"),
    ("PYTHONPATH", "a dir on the image's PYTHONPATH (python's import path)"),
    ("PERL5LIB", "a dir on the image's PERL5LIB (perl's @INC)"),
    ("PERLLIB", "a dir on the image's PERLLIB (perl's @INC)"),
    ("RUBYLIB", "a dir on the image's RUBYLIB (ruby's load path)"),
    ("GEM_HOME", "the image's GEM_HOME (ruby's gems)"),
    ("GEM_PATH", "a dir on the image's GEM_PATH (ruby's gems)"),
    ("NODE_PATH", "a dir on the image's NODE_PATH (node's module path)"),
)
#: Why a dir the image's ``/etc/ld.so.conf`` (and what it includes) names counts.
LD_SO_CONF_REASON = "a dir of the dynamic loader's search path (ld.so.conf)"
#: Why a change in the verifier's HOME (as ``/etc/passwd`` names it after the agent) counts.
HOME_REASON = "the verifier's HOME (its fresh HOME is seeded from it)"
#: Why a direct child of a dir on the image's own ``PATH`` counts.
IMAGE_PATH_REASON = "an executable on the image's PATH"


__all__ = [
    "BIND_MOUNTED",
    "DEFAULT_COMPONENTS",
    "DEFAULT_NAMES",
    "DEFAULT_SUFFIXES",
    "DEFAULT_TREES",
    "GENERIC_REASON",
    "HOME_REASON",
    "IMAGE_PATH_REASON",
    "LD_SO_CONF_REASON",
    "NOT_READ",
    "SEARCH_PATH_VARS",
]
