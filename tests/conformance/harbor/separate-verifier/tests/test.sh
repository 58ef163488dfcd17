#!/bin/bash
# Runs in a container of its own: only the declared artifacts came over.
ok=1
[ "$(cat /app/answer.txt 2>/dev/null)" = "42" ] || ok=0
[ -f /app/report/summary.md ] || ok=0
[ -e /app/report/scratch.tmp ] && ok=0      # excluded by the artifact's pattern
[ -e /app/private.txt ] && ok=0             # not declared: never copied
[ -e /app/agent-only.txt ] && ok=0          # the agent's image is not this one
echo "$ok" > /logs/verifier/reward.txt
