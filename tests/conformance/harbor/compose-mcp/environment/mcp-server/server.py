"""A minimal MCP server over streamable HTTP (JSON responses), stdlib only: one tool."""

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SECRET = "harbor-mcp-secret-12345"
TOOL = {
    "name": "get_secret",
    "description": "Returns a secret value.",
    "inputSchema": {"type": "object", "properties": {}},
}


def answer(request):
    method = request.get("method")
    if method == "initialize":
        return {
            "protocolVersion": "2025-03-26",
            "capabilities": {"tools": {}},
            "serverInfo": {"name": "conformance-mcp", "version": "1.0"},
        }
    if method == "tools/list":
        return {"tools": [TOOL]}
    if method == "tools/call" and request.get("params", {}).get("name") == "get_secret":
        return {"content": [{"type": "text", "text": SECRET}], "isError": False}
    raise KeyError(method)


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        if self.path != "/mcp":
            self.send_error(404)
            return
        request = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
        if "id" not in request:  # a notification
            self.send_response(202)
            self.end_headers()
            return
        try:
            body = {"jsonrpc": "2.0", "id": request["id"], "result": answer(request)}
        except KeyError:
            error = {"code": -32601, "message": "unknown method"}
            body = {"jsonrpc": "2.0", "id": request["id"], "error": error}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Mcp-Session-Id", "conformance")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)


ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()
