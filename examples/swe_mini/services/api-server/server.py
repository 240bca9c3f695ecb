"""The price service of the swe_mini "api" sample: a second container in the sample's sandbox.

GET /price/<item> answers {"item": ..., "cents": ...}; every request is appended to /tmp/requests.log
(the example's scorer reads it with sandbox("api") to check the client really asked the service).
"""

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

PRICES = {"apple": 120, "pear": 75, "plum": 40}
LOG = "/tmp/requests.log"


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        with open(LOG, "a") as log:
            log.write(f"GET {self.path}\n")
        item = self.path.removeprefix("/price/")
        if self.path == "/health":
            body, status = {"ok": True}, 200
        elif self.path.startswith("/price/") and item in PRICES:
            body, status = {"item": item, "cents": PRICES[item]}, 200
        else:
            body, status = {"error": f"no such item: {item}"}, 404
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):  # requests go to LOG, not stderr
        pass


if __name__ == "__main__":
    # Every address of its own container: the agent's container reaches it as http://api:8080 (as under compose).
    ThreadingHTTPServer(("0.0.0.0", 8080), Handler).serve_forever()  # noqa: S104 -- its container is the boundary
