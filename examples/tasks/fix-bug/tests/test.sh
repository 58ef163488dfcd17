#!/bin/bash
# Verifier for fix-bug: runs the hidden unit tests in tests/hidden_tests.py against
# the workspace's calc.py. Reward 1 iff every test passes.
#
# The agent's code runs here with the grader's identity, so it is run with a
# scrubbed environment and a time limit, and the reward file is (re)written
# last: anything the agent's code planted in the verifier dir is discarded.
set -u
export PATH=/usr/bin:/bin
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WS=${HARNESS_WORKSPACE:-$PWD}
VD=${HARNESS_VERIFIER_DIR:-/logs/verifier}
mkdir -p "$VD" 2>/dev/null

reward=0
if [ -L "$WS/calc.py" ] || [ ! -f "$WS/calc.py" ]; then
    echo "FAIL: calc.py is missing or not a regular file"
elif timeout -k 5 30 env -i PATH=/usr/bin:/bin HOME="${TMPDIR:-/tmp}" \
        python3 -I -B "$HERE/hidden_tests.py" "$WS" </dev/null 2>&1; then
    echo "PASS: all hidden tests passed"
    reward=1
else
    echo "FAIL: some hidden tests failed (or calc.py did not import)"
fi

rm -f "$VD/reward.json" "$VD/reward.txt"
echo "$reward" > "$VD/reward.txt"
exit 0
