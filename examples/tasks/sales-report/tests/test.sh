#!/bin/bash
# Verifier for sales-report: writes reward.json with the named criteria
# format, correct, sorted (0 or 1 each) and reward = their mean.
set -u
export PATH=/usr/bin:/bin
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
WS=${HARNESS_WORKSPACE:-$PWD}
VD=${HARNESS_VERIFIER_DIR:-/logs/verifier}
mkdir -p "$VD" 2>/dev/null
rm -f "$VD/reward.json" "$VD/reward.txt"

report="$WS/report.csv"
if [ -L "$report" ] || [ ! -f "$report" ]; then
    echo "report.csv is missing or not a regular file (symlinks are not followed)"
    report=/dev/null
fi
python3 -I -B "$HERE/grade.py" "$HERE/sales.csv" "$report" "$VD/reward.json"

# Never leave the trial without a reward, whatever happened above.
if [ ! -s "$VD/reward.json" ]; then
    echo "grader failed; scoring 0"
    echo '{"reward": 0.0, "format": 0.0, "correct": 0.0, "sorted": 0.0}' > "$VD/reward.json"
fi
exit 0
