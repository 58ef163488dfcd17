#!/bin/bash
set -euo pipefail
python3 - <<'PY'
import json, os, urllib.request

servers = {s["name"]: s for s in json.loads(os.environ["HARNESS_MCP_SERVERS"])}
url = servers["mcp-server"]["url"]

def rpc(method, params=None, ident=1):
    body = {"jsonrpc": "2.0", "method": method, "params": params or {}}
    if ident is not None:
        body["id"] = ident
    req = urllib.request.Request(url, json.dumps(body).encode(), {
        "Content-Type": "application/json", "Accept": "application/json, text/event-stream"})
    with urllib.request.urlopen(req, timeout=10) as resp:
        data = resp.read()
    return json.loads(data)["result"] if data else None

rpc("initialize", {"protocolVersion": "2025-03-26", "capabilities": {},
                   "clientInfo": {"name": "oracle", "version": "1"}})
rpc("notifications/initialized", ident=None)
secret = rpc("tools/call", {"name": "get_secret", "arguments": {}}, 2)["content"][0]["text"]
open("/app/secret.txt", "w").write(secret)
req = urllib.request.Request(os.environ["KV_URL"] + "/secret", secret.encode(), method="PUT")
urllib.request.urlopen(req, timeout=10).read()
PY
