"""A key-value store over HTTP (PUT /key stores the body, GET /key returns it)."""

from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STORE = {}


class Handler(BaseHTTPRequestHandler):
    def do_PUT(self):
        STORE[self.path] = self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.send_response(204)
        self.end_headers()

    def do_GET(self):
        if self.path not in STORE:
            self.send_error(404)
            return
        self.send_response(200)
        self.send_header("Content-Length", str(len(STORE[self.path])))
        self.end_headers()
        self.wfile.write(STORE[self.path])


ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()
