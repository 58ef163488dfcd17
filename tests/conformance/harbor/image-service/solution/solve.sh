#!/bin/bash
set -euo pipefail
python3 - <<'PY'
import urllib.request
data = urllib.request.urlopen("http://127.0.0.1:8080/greeting.txt", timeout=10).read()
open("/app/greeting.txt", "wb").write(data)
PY
