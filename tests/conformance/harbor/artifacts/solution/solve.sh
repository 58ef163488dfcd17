#!/bin/bash
set -euo pipefail
wc -l < /app/data.csv | tr -d ' ' > /app/result.txt
mkdir -p /app/out
echo "counted with wc" > /app/out/notes.md
echo "solve.sh ran" > /logs/artifacts/run-log.txt
