#!/bin/bash
# Reference solution: rewrite median() so it sorts a copy and averages the two
# middle values for an even count. Self-contained (solution/ is not in the workspace).
set -eu
export PATH=/usr/bin:/bin
cd "${HARNESS_WORKSPACE:-$PWD}"
python3 -I -B - calc.py <<'PY'
import sys

path = sys.argv[1]
src = open(path, encoding="utf-8").read()
old = """    values.sort()
    middle = len(values) // 2
    return values[middle]
"""
new = """    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return (ordered[middle - 1] + ordered[middle]) / 2
"""
if old not in src:
    sys.exit("solve.sh: calc.py does not contain the expected buggy code")
with open(path, "w", encoding="utf-8") as f:
    f.write(src.replace(old, new))
PY
