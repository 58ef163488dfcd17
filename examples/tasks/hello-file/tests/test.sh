#!/bin/bash
# Verifier for hello-file: reward 1 iff hello.txt is a regular file (not a
# symlink) whose content is exactly $EXPECTED_TEXT, optionally followed by one
# newline. EXPECTED_TEXT comes from [verifier].env in task.toml.
set -u
export PATH=/usr/bin:/bin
WS=${HARNESS_WORKSPACE:-$PWD}
VD=${HARNESS_VERIFIER_DIR:-/logs/verifier}
mkdir -p "$VD" 2>/dev/null

reward=0
if [ -z "${EXPECTED_TEXT:-}" ]; then
    echo "FAIL: EXPECTED_TEXT is not set ([verifier].env was not applied)"
elif [ -L "$WS/hello.txt" ] || [ ! -f "$WS/hello.txt" ]; then
    echo "FAIL: hello.txt is missing or not a regular file"
elif EXPECTED_TEXT="$EXPECTED_TEXT" python3 -I -B - "$WS/hello.txt" <<'PY'
import os
import sys

want = os.environ["EXPECTED_TEXT"].encode()
with open(sys.argv[1], "rb") as f:
    got = f.read(4096)
sys.exit(0 if got in (want, want + b"\n") else 1)
PY
then
    echo "PASS: hello.txt holds the expected text"
    reward=1
else
    echo "FAIL: hello.txt does not hold exactly: $EXPECTED_TEXT"
fi

rm -f "$VD/reward.json" "$VD/reward.txt"
echo "$reward" > "$VD/reward.txt"
exit 0
