#!/bin/bash
# The sidecars are still up for grading; the verifier reaches them by name too.
stored=$(python3 -c 'import urllib.request; print(urllib.request.urlopen("http://kv:8080/secret", timeout=5).read().decode(), end="")' 2>/dev/null)
if [ "$(cat /app/secret.txt 2>/dev/null)" = "harbor-mcp-secret-12345" ] && [ "$stored" = "harbor-mcp-secret-12345" ]; then
  echo 1 > /logs/verifier/reward.txt
else
  echo 0 > /logs/verifier/reward.txt
fi
