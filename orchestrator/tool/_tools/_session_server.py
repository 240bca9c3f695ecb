"""bash_session's in-sandbox side (stdlib only; copied into the sandbox, run with python3).

    python3 session.py call     < request.json   -> prints the response JSON (starts the server if needed)
    python3 session.py serve                      -> daemon holding one PTY-backed bash per instance

The server listens on a unix socket next to this file and keeps each session's output in a bounded
buffer filled by a reader thread. An action returns once output has been idle for IDLE seconds or
``wait_for_output`` has passed. The daemon exits when this file disappears (the sandbox was destroyed).
"""

import contextlib
import json
import os
import pty
import signal
import socket
import subprocess
import sys
import termios
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SOCK = os.path.join(HERE, "session.sock")
IDLE = 0.5
START_WAIT = 15.0  # seconds a new shell may take to print its first prompt
BUFFER_CAP = 1024 * 1024  # bytes of unread output kept per session (oldest dropped)


class Session:
    def __init__(self):
        env = dict(os.environ, PS1="$ ", PS2="> ", TERM="dumb", PAGER="cat", GIT_PAGER="cat")
        pid, fd = pty.fork()
        if pid == 0:
            try:
                attrs = termios.tcgetattr(0)
                attrs[3] &= ~termios.ECHO  # the model already knows what it typed
                termios.tcsetattr(0, termios.TCSANOW, attrs)
                os.chdir(os.environ.get("HOME") or "/")
            except OSError:
                pass
            os.execvpe("bash", ["bash", "--noediting", "--noprofile", "--norc", "-i"], env)  # noqa: S606 - the shell is the point
        self.pid, self.fd = pid, fd
        self.buf = bytearray()
        self.dropped = False
        self.last_output = time.monotonic()
        self.cond = threading.Condition()
        self.alive = True
        threading.Thread(target=self._reader, daemon=True).start()

    def _reader(self):
        while True:
            try:
                chunk = os.read(self.fd, 65536)
            except OSError:
                chunk = b""
            with self.cond:
                if not chunk:
                    self.alive = False
                    self.cond.notify_all()
                    return
                self.buf += chunk
                if len(self.buf) > BUFFER_CAP:
                    del self.buf[: len(self.buf) - BUFFER_CAP]
                    self.dropped = True
                self.last_output = time.monotonic()
                self.cond.notify_all()

    def write(self, data):
        view = memoryview(data)
        while len(view):
            n = os.write(self.fd, view)
            view = view[n:]

    def collect(self, wait_for_output):
        start = time.monotonic()
        deadline = start + wait_for_output
        with self.cond:
            while self.alive:
                now = time.monotonic()
                quiet_since = max(self.last_output, start)
                if now - quiet_since >= IDLE or now >= deadline:
                    break
                self.cond.wait(min(IDLE - (now - quiet_since), deadline - now))
            data, self.buf = bytes(self.buf), bytearray()
            dropped, self.dropped = self.dropped, False
        text = data.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "")
        if dropped:
            text = "[earlier output dropped]\n" + text
        if not self.alive:
            text += "\n[the shell exited; use restart]"
        return text

    def settle(self, timeout):
        """Drop the shell's start-up output up to its first prompt. Waiting for the prompt itself, not for a
        quiet moment: on a loaded host bash may print it after any fixed pause, into the first reply."""
        deadline = time.monotonic() + timeout
        with self.cond:
            while self.alive and not self.buf.endswith(b"$ "):
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self.cond.wait(left)
            self.buf = bytearray()
            self.dropped = False

    def kill(self):
        # Jobs of an interactive shell run in their own process groups: kill the whole session.
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open("/proc/%s/stat" % entry) as f:
                        fields = f.read().rsplit(")", 1)[1].split()
                    if int(fields[3]) == self.pid:  # field 6: session id
                        os.kill(int(entry), signal.SIGKILL)
                except (OSError, ValueError, IndexError):
                    pass
        with contextlib.suppress(OSError):
            os.kill(self.pid, signal.SIGKILL)
        with contextlib.suppress(OSError):
            os.close(self.fd)
        with contextlib.suppress(OSError):
            os.waitpid(self.pid, 0)


sessions = {}  # type: dict[str, Session]  # a comment: the sandbox's python3 may predate dict[...]
lock = threading.Lock()


def handle(req):
    instance = req.get("instance") or "default"
    action = req["action"]
    wait = float(req.get("wait_for_output") or 30)
    with lock:
        session = sessions.get(instance)
        if action == "restart":
            if session is not None:
                session.kill()
            sessions[instance] = Session()
            sessions[instance].settle(START_WAIT)
            return {"output": "Bash session restarted."}
        if session is None:
            session = sessions[instance] = Session()
            session.settle(START_WAIT)
    if action in ("type", "type_submit"):
        text = req.get("input") or ""
        if action == "type_submit":
            text += "\n"
        session.write(text.encode())
    elif action == "interrupt":
        session.write(b"\x03")
    elif action != "read":
        return {"error": "unknown action %r" % action}
    return {"output": session.collect(wait)}


def serve_connection(conn):
    with conn:
        data = bytearray()
        while True:
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        try:
            resp = handle(json.loads(data))
        except Exception as exc:  # noqa: BLE001 - report, never kill the daemon
            resp = {"error": "%s: %s" % (type(exc).__name__, exc)}
        conn.sendall(json.dumps(resp).encode())


def watchdog():
    while os.path.exists(os.path.abspath(__file__)):
        time.sleep(2)
    for s in list(sessions.values()):
        s.kill()
    os._exit(0)


def serve():
    with contextlib.suppress(FileNotFoundError):
        os.unlink(SOCK)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(SOCK)
    os.chmod(SOCK, 0o600)
    listener.listen(16)
    # Daemonise: the caller's exec returns now; we leave its process group (a timeout on that call
    # must not kill the sessions) and hold no pipe of it open.
    if os.fork():
        os._exit(0)
    os.setsid()
    if os.fork():
        os._exit(0)
    devnull = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(devnull, fd)
    threading.Thread(target=watchdog, daemon=True).start()
    while True:
        conn, _ = listener.accept()
        threading.Thread(target=serve_connection, args=(conn,), daemon=True).start()


def call():
    request = sys.stdin.buffer.read()
    deadline = time.monotonic() + 10
    started = False
    while True:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(SOCK)
            break
        except OSError:
            sock.close()
            if not started:
                subprocess.run([sys.executable, os.path.abspath(__file__), "serve"], check=False, timeout=10)
                started = True
            elif time.monotonic() > deadline:
                print(json.dumps({"error": "bash_session server did not start"}))
                return
            time.sleep(0.05)
    with sock:
        sock.sendall(request)
        sock.shutdown(socket.SHUT_WR)
        response = bytearray()
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            response += chunk
    sys.stdout.write(response.decode("utf-8", "replace"))


if __name__ == "__main__":
    {"serve": serve, "call": call}[sys.argv[1]]()
