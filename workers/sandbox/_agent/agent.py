"""toolfleet's in-sandbox exec agent (stdlib only; runs on the sandbox image's python3 >= 3.8).

Started ONCE per (container, user) with stdin/stdout attached; afterwards every command costs one
process spawn instead of a ``docker exec``. The host multiplexes requests by id over the channel.

Frame (both directions): ``>IBI`` = request id, kind, payload length; then the payload. Binary-safe
and unambiguous: a reader always knows how many bytes belong to a frame.

  host -> agent   RUN  (1): u32 json length, json spec, stdin bytes
                  KILL (2): empty; kill the process group of that request
                  PING (3): empty; answered with PONG
  agent -> host   RESULT (4): u32 json length, json status, stdout bytes, stderr bytes
                  PONG   (5): json {"version", "pid", "uid"}

Every command runs in its own session/process group (setsid), so a timeout kills the whole group;
output is capped here, at the source (bytes beyond the cap are read and dropped, never held).
The agent never switches users: the host starts one agent per user (Docker capabilities stay dropped).
"""

import json
import os
import selectors
import signal
import struct
import subprocess
import sys
import threading
import time

VERSION = 1
HEADER = struct.Struct(">IBI")
U32 = struct.Struct(">I")
RUN, KILL, PING, RESULT, PONG = 1, 2, 3, 4, 5
# After the command exits, background children may still hold its pipes open; wait this long for
# EOF, then return (they keep running, as with a shell).
EXIT_GRACE = 0.5
OOM_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")

_out = sys.stdout.buffer
_out_lock = threading.Lock()
_procs = {}
_killed = set()  # KILL frames that arrived before their command had started
_procs_lock = threading.Lock()
_oom_seen = None  # the cgroup's oom_kill counter when last read


def send(req_id, kind, payload):
    data = HEADER.pack(req_id, kind, len(payload)) + payload
    with _out_lock:
        _out.write(data)
        _out.flush()


def oom_kills():
    for path in OOM_FILES:
        try:
            with open(path) as f:
                for line in f:
                    key, _, value = line.partition(" ")
                    if key == "oom_kill":
                        return int(value)
        except (OSError, ValueError):
            continue
    return None


def oom_happened():
    """Did the cgroup's OOM-kill counter move since we last looked? (Only asked after a SIGKILL,
    so the common path reads no files.)"""
    global _oom_seen
    with _procs_lock:
        now = oom_kills()
        moved = now is not None and _oom_seen is not None and now > _oom_seen
        _oom_seen = now
    return moved


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def run(req_id, spec, stdin_data):
    cap = int(spec.get("cap") or 10 * 1024 * 1024)
    timeout = spec.get("timeout")
    env = None
    if spec.get("env"):
        env = dict(os.environ)
        env.update(spec["env"])
    status = {"returncode": 0, "timed_out": False, "truncated": False, "oom": False}
    bufs = {1: bytearray(), 2: bytearray()}
    try:
        proc = subprocess.Popen(
            spec["argv"],
            stdin=subprocess.PIPE if spec.get("input") else subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=spec.get("cwd") or None,
            env=env,
            start_new_session=True,
            close_fds=True,
        )
    except OSError as exc:
        # Same codes a shell uses: 127 not found, 126 found but not executable.
        status["returncode"] = 127 if isinstance(exc, FileNotFoundError) else 126
        status["error"] = {"errno": exc.errno, "strerror": exc.strerror, "filename": exc.filename}
        bufs[2] += ("%s: %s" % (exc.filename or spec["argv"][0], exc.strerror)).encode()
        finish(req_id, status, bufs)
        return
    with _procs_lock:
        _procs[req_id] = proc
        if req_id in _killed:
            _killed.discard(req_id)
            kill_group(proc)
    try:
        pump(proc, stdin_data if spec.get("input") else None, bufs, cap, timeout, status)
    finally:
        with _procs_lock:
            _procs.pop(req_id, None)
    code = proc.wait()
    status["returncode"] = 128 - code if code < 0 else code
    if code == -signal.SIGKILL and not status["timed_out"]:
        status["oom"] = oom_happened()
    finish(req_id, status, bufs)


def pump(proc, stdin_data, bufs, cap, timeout, status):
    deadline = None if timeout is None else time.monotonic() + float(timeout)
    sel = selectors.DefaultSelector()
    sel.register(proc.stdout, selectors.EVENT_READ, 1)
    sel.register(proc.stderr, selectors.EVENT_READ, 2)
    pending = memoryview(stdin_data) if stdin_data is not None else None
    if pending is not None:
        if len(pending):
            os.set_blocking(proc.stdin.fileno(), False)
            sel.register(proc.stdin, selectors.EVENT_WRITE, 0)
        else:
            proc.stdin.close()
    open_reads = 2
    exited_at = None
    while open_reads:
        now = time.monotonic()
        if deadline is not None and now >= deadline:
            status["timed_out"] = True
            kill_group(proc)
            deadline = None
            exited_at = now  # drain what the dying group already wrote, briefly
        wait = 0.1
        if deadline is not None:
            wait = min(wait, max(deadline - now, 0))
        for key, _ in sel.select(wait):
            if key.data == 0:
                try:
                    n = os.write(key.fileobj.fileno(), pending[:65536])
                except (BrokenPipeError, OSError):
                    n = len(pending)
                pending = pending[n:]
                if not len(pending):
                    sel.unregister(key.fileobj)
                    key.fileobj.close()
                continue
            chunk = os.read(key.fileobj.fileno(), 65536)
            if not chunk:
                sel.unregister(key.fileobj)
                open_reads -= 1
                continue
            buf = bufs[key.data]
            room = cap - len(buf)
            if room > 0:
                buf += chunk[:room]
            if len(chunk) > room:
                status["truncated"] = True  # keep draining so the writer never blocks
        if exited_at is None and proc.poll() is not None:
            exited_at = time.monotonic()
        if exited_at is not None and time.monotonic() - exited_at > EXIT_GRACE:
            break
    sel.close()
    for f in (proc.stdin, proc.stdout, proc.stderr):
        if f is not None and not f.closed:
            try:
                f.close()
            except OSError:
                pass


def finish(req_id, status, bufs):
    out, err = bytes(bufs[1]), bytes(bufs[2])
    status["stdout_len"] = len(out)
    head = json.dumps(status).encode()
    send(req_id, RESULT, U32.pack(len(head)) + head + out + err)


def read_exact(stream, n):
    data = bytearray()
    while len(data) < n:
        chunk = stream.read(n - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def main():
    global _oom_seen
    _oom_seen = oom_kills()
    inp = sys.stdin.buffer
    while True:
        header = read_exact(inp, HEADER.size)
        if header is None:
            break  # the host went away: stop; running commands are killed below
        req_id, kind, length = HEADER.unpack(header)
        payload = read_exact(inp, length) if length else b""
        if payload is None:
            break
        if kind == RUN:
            (jlen,) = U32.unpack_from(payload)
            spec = json.loads(payload[4 : 4 + jlen])
            threading.Thread(target=run, args=(req_id, spec, payload[4 + jlen :]), daemon=True).start()
        elif kind == KILL:
            with _procs_lock:
                proc = _procs.get(req_id)
                if proc is None:
                    _killed.add(req_id)
            if proc is not None:
                kill_group(proc)
        elif kind == PING:
            info = {"version": VERSION, "pid": os.getpid(), "uid": os.getuid()}
            send(req_id, PONG, json.dumps(info).encode())
    with _procs_lock:
        for proc in list(_procs.values()):
            kill_group(proc)


if __name__ == "__main__":
    main()
