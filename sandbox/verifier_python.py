"""The ``sitecustomize`` every Python of a verifier loads first: a script's own dir back.

A verifier runs with ``PYTHONSAFEPATH=1`` (:data:`harness.trial.env.UNSTEERED_PYTHON`), so
``python3 -m pytest`` or ``python3 -c ...`` started in the agent's workspace never imports
the agent's ``pytest.py``. The same variable also keeps a script's own dir off
``sys.path``, which a task's ``python test.py`` needs to import its sibling ``run.py``.
CPython has no switch for one without the other, but at ``sitecustomize`` time
``sys.argv[0]`` tells them apart (``-m``, ``-c``, ``-`` or empty, else the script's path).
So the verifier's ``PYTHONPATH`` starts with the harness's read-only site dir (staged by
:func:`sandbox.verifier_tools.stage_tools`), whose ``sitecustomize.py`` (:data:`SOURCE`):

- then, for a script (a regular file named on the command line), and only when
  ``sys.flags.safe_path`` is set and not by ``-P``, puts its dir in front of ``sys.path``,
  resolved as CPython resolves it; a dir or zip is put there by CPython itself, and
  ``-m``, ``-c``, stdin and the REPL get nothing;
- first takes its own dir off ``sys.path`` and imports the next ``sitecustomize`` on it
  (the image's: Debian's, Ubuntu's apport hook), as if it were the only one, before the
  script's dir is there (as in CPython: a ``sitecustomize.py`` beside the script is not
  imported).

``PYTHONSAFEPATH`` stays set, so every Python started in the verifier, by any name or path
(``sys.executable`` included), loads this and gets its own script dir, never its start dir.
Not covered: ``-I``, ``-E`` and ``-S``, which skip ``PYTHONPATH`` or ``site`` (the author
asked for no script dir, or no site, with them), and Pythons before 3.11 (no
``PYTHONSAFEPATH``: the script dir is on their path anyway). The source runs on Python
2.7 and 3.x, whatever the image holds.
"""

#: The file's name in the site dir.
NAME = "sitecustomize.py"

#: The module (py2.7/py3 syntax; it must never stop a Python from starting).
SOURCE = r"""# The harness's sitecustomize for a verifier's Pythons (sandbox/verifier_python.py).
import os as _os
import sys as _sys


def _harness_said_p(first):
    for arg in list(getattr(_sys, "orig_argv", None) or [])[1:]:
        if arg == first:
            return False
        if arg.startswith("-") and not arg.startswith("--"):
            for ch in arg[1:]:
                if ch == "P":
                    return True
                if ch in "WX":
                    break
    return False


def _harness_script_dir():
    if not getattr(_sys.flags, "safe_path", False):
        return
    argv = getattr(_sys, "argv", None) or [""]
    first = argv[0]
    if first in ("", "-", "-c", "-m") or first.endswith((".zip", ".pyz")):
        return
    if _harness_said_p(first):
        return
    try:
        if not _os.path.isfile(first):
            return
        _sys.path.insert(0, _os.path.dirname(_os.path.realpath(first)))
    except Exception:
        pass


def _harness_next_sitecustomize():
    here = _os.path.dirname(_os.path.realpath(__file__))
    kept = []
    for entry in _sys.path:
        try:
            if entry and _os.path.realpath(entry) == here:
                continue
        except Exception:
            pass
        kept.append(entry)
    _sys.path[:] = kept
    ours = _sys.modules.pop("sitecustomize", None)
    try:
        import sitecustomize  # noqa: F401 - the image's own, if any
    except ImportError as exc:
        if getattr(exc, "name", "sitecustomize") != "sitecustomize":
            raise
    if "sitecustomize" not in _sys.modules and ours is not None:
        _sys.modules["sitecustomize"] = ours


# The image's sitecustomize first, as CPython imports it before the script dir is on the
# path: a sitecustomize.py beside the script is never imported.
_harness_next_sitecustomize()
_harness_script_dir()
"""
