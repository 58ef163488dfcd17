#!/bin/bash
# The service must still be up after the agent (phase kills spare the image's workload).
expected=$(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://127.0.0.1:8080/greeting.txt", timeout=5).read().decode(), end="")')
if [ -f /app/greeting.txt ] && [ "$(cat /app/greeting.txt)" = "$expected" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
