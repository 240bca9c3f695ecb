"""A tiny in-memory key-value service: GET /KEY, PUT /KEY (the body is the value)."""
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

STORE = {"greeting": "hello harbor"}


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        value = STORE.get(self.path.lstrip("/"))
        self.send_response(200 if value is not None else 404)
        self.end_headers()
        self.wfile.write((value or "").encode())

    def do_PUT(self):
        length = int(self.headers.get("Content-Length") or 0)
        STORE[self.path.lstrip("/")] = self.rfile.read(length).decode()
        self.send_response(204)
        self.end_headers()

    def log_message(self, *args):
        pass


# 0.0.0.0: the main service reaches this one by its name, "kv", from a namespace of its own (as under compose).
ThreadingHTTPServer(("0.0.0.0", 8000), Handler).serve_forever()  # noqa: S104 (a pod service: its network is the sandbox's own)
