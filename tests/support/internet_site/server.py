"""The test internet's web server: a directory over HTTP, one JSON line per request on stdout.

``install.sh`` is sent with ``@BASE_URL@`` replaced by ``http://<the request's Host>``, so the same installer
works at whatever address a client reached it by (its private address, or a port published on the host) and
fetches the runner from there, as a real installer fetches from its own site.

    python3 server.py SITE_DIR PORT
"""

from __future__ import annotations

import json
import re
import sys
from functools import partial
from http.server import SimpleHTTPRequestHandler, ThreadingHTTPServer

_HOST = re.compile(r"[A-Za-z0-9.\-]+(:[0-9]{1,5})?|\[[0-9A-Fa-f:.]+\](:[0-9]{1,5})?")


class Handler(SimpleHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:
        if self.path.split("?", 1)[0] == "/install.sh":
            self._installer()
        else:
            super().do_GET()

    def _installer(self) -> None:
        host = self.headers.get("Host", "")
        if not _HOST.fullmatch(host):
            self.send_error(400, "bad Host header")
            return
        with open(f"{self.directory}/install.sh", encoding="utf-8") as template:
            body = template.read().replace("@BASE_URL@", f"http://{host}").encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/x-shellscript")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_request(self, code: int | str = "-", size: int | str = "-") -> None:
        status = code.value if hasattr(code, "value") else code
        print(json.dumps({"method": self.command, "path": self.path, "status": int(status) if str(status).isdigit()
                          else status, "client": self.client_address[0]}), flush=True)

    def log_message(self, format: str, *args: object) -> None:  # errors go to stderr, requests to stdout
        sys.stderr.write(format % args + "\n")


def main() -> None:
    site, port = sys.argv[1], int(sys.argv[2])
    server = ThreadingHTTPServer(("0.0.0.0", port), partial(Handler, directory=site))
    server.daemon_threads = True
    print(json.dumps({"listening": port}), flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
