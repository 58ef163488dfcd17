#!/bin/bash
set -euo pipefail
echo 42 > /app/answer.txt
mkdir -p /app/report
echo "19 + 23 = 42" > /app/report/summary.md
echo "scratch" > /app/report/scratch.tmp
echo "not an artifact" > /app/private.txt
