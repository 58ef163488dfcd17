"""The ``python`` and ``python3`` a verifier finds first on its PATH.

A verifier runs with ``PYTHONSAFEPATH=1`` (:data:`harness.trial.env.UNSTEERED_PYTHON`), so
``python3 -m pytest`` or ``python3 -c ...`` started in the agent's workspace never imports
the agent's ``pytest.py``. The same variable also keeps a script's own dir off
``sys.path``, which a task's ``python test.py`` needs to import its sibling ``run.py``.
CPython has no switch for one without the other, so this shell wrapper, staged in the
verifier's tools dir and put in front of its PATH, tells them apart: for a script (a file,
a dir or a zip named on the command line) it puts the script's dir (the resolved one, as
CPython does) in front of ``PYTHONPATH``; for ``-m``, ``-c``, ``-`` and the REPL, and under
``-E``, ``-I`` or ``-P``, it adds nothing. ``PYTHONSAFEPATH`` stays set either way, so no
Python started from that one puts its start dir on ``sys.path`` either. It then runs the
next ``python``/``python3`` on PATH (absolute entries only) with the same arguments.

What it does not cover: a Python started by another name or an absolute path
(``python3.12 x.py``, ``/usr/bin/python3 x.py``) keeps ``PYTHONSAFEPATH`` whole, without
its script dir, and an image without ``/bin/sh``.
"""

#: The names staged (each the same script).
NAMES = ("python", "python3")

#: The wrapper (POSIX sh; no bashisms, since ``/bin/sh`` may be dash or busybox).
WRAPPER = r"""#!/bin/sh
# python / python3 for a verifier (harness): the next one on PATH, started as its author
# meant. PYTHONSAFEPATH=1 stays set (so -m, -c, stdin and the REPL never put the start
# dir, the agent's workspace, on sys.path, and neither does any Python this one starts);
# a script named on the command line gets its own dir back, in front, through PYTHONPATH,
# as a plain "python script.py" would without PYTHONSAFEPATH (not under -E, -I or -P).
# Shell builtins only (PATH may hold no coreutils), but an optional readlink.
me=${0##*/}
case $0 in */*) here=${0%/*} ;; *) here=. ;; esac
script=
skip=
own=1
for arg in "$@"; do
  if [ -n "$skip" ]; then skip=; continue; fi
  case $arg in
    --check-hash-based-pycs) skip=1; continue ;;
    -|--) break ;;
    --*) continue ;;
    -?*)
      flags=${arg#-}
      stop=
      while [ -n "$flags" ]; do
        ch=${flags%"${flags#?}"}
        flags=${flags#?}
        case $ch in
          c|m) stop=1; break ;;
          E|I|P) own= ;;
          W|X) [ -z "$flags" ] && skip=1; flags= ;;
        esac
      done
      [ -n "$stop" ] && break
      continue ;;
    *) script=$arg; break ;;
  esac
done
if [ -n "$script" ] && [ -n "$own" ]; then
  case $script in /*) ;; *) script=$(pwd -P)/$script ;; esac
  dir=
  if [ -d "$script" ]; then
    dir=$(cd -P -- "$script" 2>/dev/null && pwd -P)
  else
    case $script in
      *.pyz|*.zip) dir=$script ;;
      *) real=$(readlink -f -- "$script" 2>/dev/null) || real=$script
         real=${real:-$script}
         dir=$(cd -P -- "${real%/*}/" 2>/dev/null && pwd -P) ;;
    esac
  fi
  case $dir in
    /*:*|'') ;;
    /*) PYTHONPATH=$dir${PYTHONPATH:+:$PYTHONPATH}; export PYTHONPATH ;;
  esac
fi
ours=$(cd -P -- "$here" 2>/dev/null && pwd -P)
rest=$PATH
while [ -n "$rest" ]; do
  entry=${rest%%:*}
  case $rest in *:*) rest=${rest#*:} ;; *) rest= ;; esac
  case $entry in /*) ;; *) continue ;; esac
  [ "$(cd -P -- "$entry" 2>/dev/null && pwd -P)" = "$ours" ] && continue
  [ "$entry/$me" -ef "$0" ] && continue
  if [ -f "$entry/$me" ] && [ -x "$entry/$me" ]; then
    exec "$entry/$me" "$@"
  fi
done
echo "$me: not found on PATH ($PATH)" >&2
exit 127
"""
