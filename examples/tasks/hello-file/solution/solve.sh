#!/bin/bash
# Reference solution. GREETING comes from [solution].env in task.toml.
set -eu
export PATH=/usr/bin:/bin
cd "${HARNESS_WORKSPACE:-$PWD}"
if [ -z "${GREETING:-}" ]; then
    echo "solve.sh: GREETING is not set ([solution].env was not applied)" >&2
    exit 1
fi
printf '%s\n' "$GREETING" > hello.txt
