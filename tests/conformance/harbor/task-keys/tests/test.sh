#!/bin/bash
expected=$(printf 'agent\n/work\n%s\nskills are copied in for the agent' "$EXPECTED_MODE")
owner=$(python3 -c 'import os, pwd; print(pwd.getpwuid(os.stat("/work/notes.txt").st_uid).pw_name)' 2>/dev/null)
if [ "$(cat /work/notes.txt 2>/dev/null)" = "$expected" ] && [ "$owner" = agent ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo "got: $(cat /work/notes.txt 2>/dev/null); owner: $owner"
  echo 0 > /logs/verifier/reward.txt
fi
