#!/bin/bash
# Verifier for anti-fake. Everything is recomputed independently (see grade.py);
# the agent's status.txt is only reported. The agent's manifest.sh runs with the
# grader's identity, so it gets a scrubbed env and a time limit, its session is
# killed afterwards, and the reward file is removed and written last: a reward
# planted by the agent's code never survives.
set -u
export PATH=/usr/bin:/bin
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WS=${HARNESS_WORKSPACE:-$PWD}
VD=${HARNESS_VERIFIER_DIR:-/logs/verifier}
mkdir -p "$VD" 2>/dev/null

reward=0
if timeout -k 5 50 python3 -I -B "$HERE/grade.py" "$HERE" "$WS" </dev/null; then
    reward=1
fi

rm -f "$VD/reward.json" "$VD/reward.txt"
echo "$reward" > "$VD/reward.txt"
exit 0
