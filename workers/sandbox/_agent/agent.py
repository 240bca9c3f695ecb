"""toolfleet's in-sandbox exec agent (stdlib only; runs on the sandbox image's python3 >= 3.8).

Started ONCE per (container, user) with stdin/stdout attached; afterwards every command costs one
process spawn instead of a ``docker exec``. The host multiplexes requests by id over the channel.

Frame (both directions): ``>IBI`` = request id, kind, payload length; then the payload. Binary-safe
and unambiguous: a reader always knows how many bytes belong to a frame.

  host -> agent   RUN  (1): u32 json length, json spec, stdin bytes
                  KILL (2): empty; kill the process group of that request
                  PING (3): empty; answered with PONG
                  CONNECT (8): json {"path"}; answered with CONNECTED
  agent -> host   RESULT (4): u32 json length, json status, stdout bytes, stderr bytes; the status
                              of a command that ran has "agent_seconds": from taking up the RUN
                              to the result (its time in the sandbox; the rest of a round trip
                              is the channel's)
                  PONG   (5): json {"version", "pid", "uid", "oom_kills"}
                  CONNECTED (9): json {"ok": true} or {"error"}

Direct channel (protocol 5): the HOST listens, on a unix socket in a directory it owns and
bind-mounts read-only into the container; on CONNECT the agent connects to that path and the
connection becomes the channel (frames read from it, answers written to it). The host accepts a
connection only from this agent's pid (``SO_PEERCRED``), and never resolves a path inside the
sandbox, so nothing the sandbox writes can redirect it. stdin stays open as the lifetime anchor:
EOF there still ends the agent. The direct channel skips the Docker daemon's stream copying
(measured here: ~0.4 ms less per call, and no daemon CPU per call).

Nothing a request carries can end the agent: an argv the kernel cannot take (a NUL byte, a lone
surrogate, a wrong type) is that request's error result. Output is kept as head and tail up to the
request's cap (the middle is dropped as it arrives and counted), so a command printing 500 MB costs
at most ``cap`` bytes per stream here.

One thread, one selector: the channel, every command's pipes and a SIGCHLD wakeup all feed the same
loop, so concurrent commands cost no threads. Commands start with ``posix_spawn`` (vfork-like) in a
new session, so a timeout kills the whole process group; output is capped here, at the source
(bytes beyond the cap are read and dropped, never held). The agent never switches users: the host
starts one agent per user (Docker capabilities stay dropped).

Warm spares (protocol 3; RUN spec ``"spares": n``, 0 disables): the python tool's exact command
(``bash --login -c "python3 -"`` with the code on stdin) is pre-spawned — same argv, env, cwd — with
its output pipes already the future call's and a bootstrap on stdin; see ``Spare``. Only that form
is warm: every other argv spawns cold, exactly as before.
"""

import contextlib
import fcntl
import glob
import json
import os
import selectors
import shutil
import signal
import socket
import struct
import termios
import time

VERSION = 5
HEADER = struct.Struct(">IBI")
U32 = struct.Struct(">I")
RUN, KILL, PING, RESULT, PONG, CONNECT, CONNECTED = 1, 2, 3, 4, 5, 8, 9
CONNECT_TIMEOUT = 5.0
DEFAULT_CAP = 1024 * 1024
# After the command exits, background children may still hold its pipes open; wait this long for
# EOF, then return (they keep running, as with a shell).
EXIT_GRACE = 0.5
CHUNK = 65536
OOM_FILES = ("/sys/fs/cgroup/memory.events", "/sys/fs/cgroup/memory/memory.oom_control")
# What subprocess's restore_signals does (the interpreter ignores SIGPIPE/SIGXFSZ, commands must not), and
# more: a command starts with these at their defaults whatever the agent inherited. A local sandbox's agent
# under a worker started as a background job (nohup, `&`) inherits SIGHUP/SIGINT/SIGQUIT ignored, and
# bash_session's interrupt (SIGINT) must still stop the command, as in a fresh shell.
DEFAULT_SIGNALS = tuple(getattr(signal, name) for name in ("SIGPIPE", "SIGXFSZ", "SIGHUP", "SIGINT", "SIGQUIT")
                        if hasattr(signal, name))


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


def bad_argv(argv, env, cwd):
    """Why the kernel could not take this command (None if it can): checked before any fd is made."""
    if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
        return "argv must be a non-empty list of strings"
    texts = list(argv) + ([cwd] if cwd else [])
    if env:
        if not isinstance(env, dict):
            return "env must be an object"
        texts += [str(k) for k in env] + [str(v) for v in env.values()]
    for text in texts:
        if "\0" in text:
            return "the command contains a NUL byte, which no process can take as an argument"
        try:
            os.fsencode(text)
        except UnicodeError:
            return "the command contains a lone surrogate, which cannot be encoded as UTF-8"
    return None


def start_time(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[19]  # field 22: start time in clock ticks
    except (OSError, IndexError):
        return None


class Capture:
    """One stream's output, bounded: the first ``cap - cap // 2`` bytes and the last ``cap // 2``."""

    __slots__ = ("head", "tail", "head_cap", "tail_cap", "total")

    def __init__(self, cap):
        self.tail_cap = cap // 2
        self.head_cap = cap - self.tail_cap
        self.head = bytearray()
        self.tail = bytearray()
        self.total = 0

    def add(self, chunk):
        self.total += len(chunk)
        room = self.head_cap - len(self.head)
        if room > 0:
            self.head += chunk[:room]
            chunk = chunk[room:]
        if chunk and self.tail_cap:
            self.tail += chunk
            if len(self.tail) > 2 * self.tail_cap:  # trim in batches, not on every chunk
                del self.tail[:-self.tail_cap]

    @property
    def truncated(self):
        return self.total > self.head_cap + self.tail_cap

    def value(self):
        if not self.truncated:
            return bytes(self.head + self.tail)
        omitted = self.total - self.head_cap - self.tail_cap
        marker = ("\n[... %d bytes omitted ...]\n" % omitted).encode()
        return bytes(self.head) + marker + bytes(self.tail[-self.tail_cap:] if self.tail_cap else b"")


class Job:
    __slots__ = ("req_id", "pid", "cap", "deadline", "bufs", "open_reads", "stdin_fd", "pending",
                 "code", "exited_at", "timed_out", "retry", "received")

    def __init__(self, req_id, pid, cap, timeout, received):
        self.req_id = req_id
        self.received = received  # when its RUN frame was taken up: the in-sandbox time starts here
        self.pid = pid
        self.cap = cap
        self.deadline = None if timeout is None else time.monotonic() + float(timeout)
        self.bufs = {1: Capture(cap), 2: Capture(cap)}
        self.open_reads = 2
        self.stdin_fd = None
        self.pending = None
        self.code = None
        self.exited_at = None
        self.timed_out = False
        self.retry = None  # warm jobs: (spec, stdin, read end of its stdin) to rerun cold if need be

    def kill(self):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.pid, signal.SIGKILL)


# --- warm spares ------------------------------------------------------------------------------

# The python tool's command (orchestrator/tool/_tools/_execute.py). Only this exact form, with input, is warm.
PYTHON_ARGV = ["bash", "--login", "-c", "python3 -"]
MAX_WARM_KEYS = 2  # distinct (cwd, env) combinations kept warm; the oldest is dropped
# The bootstrap is the spare's stdin, so `python3 -` runs it as __main__ with sys.argv == ["-"]
# exactly as a cold run would. It then swaps in the call's stdin (fd 3), reads the code there —
# blocking until the call comes — and runs it in a pristine __main__ under the name "<stdin>".
# It imports nothing new (os is loaded by start-up) and hides its own frame from tracebacks.
# Before blocking it compiles and runs a throwaway snippet: on fuse-overlayfs the first use of the
# compiler and eval loop pages in code through FUSE (~2 ms), which the call should not pay.
BOOT = b"""def _toolfleet_boot():
    import sys
    g = sys.modules["__main__"].__dict__
    del g["_toolfleet_boot"]
    os = sys.modules.get("os") or __import__("os")
    exec(compile(b"x = 1\\n", "<stdin>", "exec", dont_inherit=True), {})
    os.dup2(3, 0)
    os.close(3)
    parts = []
    while True:
        part = os.read(0, 65536)
        if not part:
            break
        parts.append(part)
    try:
        code = compile(b"".join(parts), "<stdin>", "exec", dont_inherit=True)
        del parts, part
        exec(code, g)
    except (SystemExit, KeyboardInterrupt):
        raise
    except BaseException as exc:
        tb = exc.__traceback__.tb_next
        exc.__traceback__ = tb
        sys.last_type, sys.last_value, sys.last_traceback = type(exc), exc, tb
        if sys.version_info >= (3, 12):
            sys.last_exc = exc
        sys.excepthook(type(exc), exc, tb)
        raise SystemExit(1)
_toolfleet_boot()
"""


def stamp_paths(env):
    """Files and directories whose state a spare's start-up read: profiles, PATH, site dirs.

    A directory's mtime changes when an entry is added or removed (a new .pth file, a new user
    site, a newly installed binary), so a spare that predates such a change is never used.
    """
    home = env.get("HOME") or os.path.expanduser("~")
    paths = ["/etc/profile", "/etc/profile.d", "/etc/bash.bashrc", "/usr/lib/python3/dist-packages"]
    paths += [os.path.join(home, name) for name in (".bash_profile", ".bash_login", ".profile", ".bashrc",
                                                    ".local", ".local/lib")]
    path_dirs = [d for d in env.get("PATH", "").split(":") if d]
    paths += path_dirs
    roots = ["/usr/lib", "/usr/local/lib", os.path.join(home, ".local/lib")]
    roots += [os.path.join(os.path.dirname(d), "lib") for d in path_dirs]  # venvs and prefixes on PATH
    for root in roots:
        for lib in glob.glob(os.path.join(root, "python3*")):
            paths += [lib, os.path.join(lib, "site-packages"), os.path.join(lib, "dist-packages")]
    # A missing path is watched through its nearest existing ancestor, whose mtime changes when
    # it appears: fewer (and no negative) lookups, which are slow through FUSE. Once something
    # changed, the agent recomputes this list for the next spares.
    watched = set()
    for path in paths:
        while path and path != "/" and not os.path.exists(path):
            path = os.path.dirname(path)
        watched.add(path or "/")
    return sorted(watched)


def unread_bytes(fd):
    try:
        return struct.unpack("i", fcntl.ioctl(fd, termios.FIONREAD, b"\0\0\0\0"))[0]
    except OSError:
        return 0


def stamp(paths):
    out = []  # type: list[tuple[int, int, int] | None]
    for path in paths:
        try:
            st = os.stat(path)
            out.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


class Spare:
    """A pre-spawned python tool process: its stdout/stderr are the future call's, its stdin (fd 3 at
    first) waits for the call's code. Used by one call only, like any cold process."""

    __slots__ = ("err_r", "in_r", "in_w", "out_r", "paths", "pid", "stamp")

    def __init__(self, pid, out_r, err_r, in_r, in_w, paths, stamp_):
        self.pid, self.out_r, self.err_r, self.in_r, self.in_w = pid, out_r, err_r, in_r, in_w
        self.paths, self.stamp = paths, stamp_


class Agent:
    def __init__(self):
        self.sel = selectors.DefaultSelector()
        self.jobs = {}
        self.inbufs = {0: bytearray()}  # per channel fd: stdin, then the direct socket if any
        self.out_fd = 1  # where answers go: stdout, then the direct socket
        self.conn = None  # the host's direct channel, once connected
        self.devnull = os.open(os.devnull, os.O_RDONLY)  # non-inheritable, like every fd Python opens
        self.oom_seen = oom_kills()
        self.running = True
        self.sessions = {}  # leader pid -> its start time
        self.spares = {}  # warm key -> [Spare]; insertion order = least recently used first
        self.spare_env = {}  # warm key -> (argv env, cwd, stamp paths, wanted count)
        self.refills = []  # warm keys to top up when the loop is idle
        self.dying = set()  # killed spares still to reap
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        signal.set_wakeup_fd(wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler (not SIG_IGN): children stay reapable
        self.sel.register(wake_r, selectors.EVENT_READ, ("wake", None))
        self.sel.register(0, selectors.EVENT_READ, ("chan", 0))

    # --- channel ------------------------------------------------------------------------------

    def send(self, req_id, kind, payload):
        data = memoryview(HEADER.pack(req_id, kind, len(payload)) + payload)
        while len(data):
            data = data[os.write(self.out_fd, data):]

    def on_channel(self, fd):
        try:
            chunk = os.read(fd, 1 << 20)
        except OSError:
            chunk = b""
        if not chunk:
            self.running = False  # the host went away (either channel)
            return
        inbuf = self.inbufs[fd]
        inbuf += chunk
        offset = 0
        while len(inbuf) - offset >= HEADER.size:
            req_id, kind, length = HEADER.unpack_from(inbuf, offset)
            end = offset + HEADER.size + length
            if len(inbuf) < end:
                break
            payload = bytes(inbuf[offset + HEADER.size:end])
            offset = end
            try:
                self.handle(fd, req_id, kind, payload)
            except Exception as exc:  # noqa: BLE001 - one bad request is its own error, never the agent's end
                if kind == RUN and req_id not in self.jobs:
                    self.refuse(req_id, "toolfleet exec agent: bad request: %r" % (exc,))
        del inbuf[:offset]

    def handle(self, fd, req_id, kind, payload):
        if kind == RUN:
            (jlen,) = U32.unpack_from(payload)
            self.start(req_id, json.loads(payload[4:4 + jlen]), payload[4 + jlen:])
        elif kind == KILL:
            job = self.jobs.get(req_id)
            if job is not None:
                job.kill()
        elif kind == PING:
            info = {"version": VERSION, "pid": os.getpid(), "uid": os.getuid(), "oom_kills": self.oom_seen}
            self.send(req_id, PONG, json.dumps(info).encode())
        elif kind == CONNECT and fd == 0:
            self.connect(req_id, json.loads(payload)["path"])

    def refuse(self, req_id, message, code=126):
        status = {"returncode": code, "timed_out": False, "truncated": False, "oom": False,
                  "error": {"errno": None, "strerror": message}}
        self.finish_raw(req_id, status, b"", message.encode("utf-8", "replace"))

    def connect(self, req_id, path):
        """Move the channel to the host's socket (see the module docstring); answered on stdout."""
        if self.conn is not None:
            self.send(req_id, CONNECTED, json.dumps({"error": "already connected"}).encode())
            return
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.settimeout(CONNECT_TIMEOUT)
            conn.connect(path)
            conn.settimeout(None)
        except OSError as exc:
            conn.close()
            self.send(req_id, CONNECTED, json.dumps({"error": str(exc)}).encode())
            return
        self.send(req_id, CONNECTED, b'{"ok": true}')
        self.conn = conn
        fd = conn.fileno()
        self.inbufs[fd] = bytearray()
        self.out_fd = fd
        self.sel.register(fd, selectors.EVENT_READ, ("chan", fd))

    # --- commands -----------------------------------------------------------------------------

    def start(self, req_id, spec, stdin_data, received=None):
        # `received`: when the RUN was taken up (a warm call rerun cold keeps its first attempt's).
        received = time.monotonic() if received is None else received
        argv = spec["argv"]
        problem = bad_argv(argv, spec.get("env"), spec.get("cwd"))
        if problem:
            self.refuse(req_id, "toolfleet exec agent: " + problem)
            return
        env = {**os.environ, **spec["env"]} if spec.get("env") else os.environ
        cwd = spec.get("cwd")
        key = self.warm_key(spec, stdin_data)
        if key is not None:
            if key not in self.spare_env:
                self.spare_env[key] = [env, cwd, None, int(spec["spares"])]  # paths: at first spawn
            if self.take(req_id, key, spec, stdin_data, received):
                return
        has_input = bool(spec.get("input"))
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if has_input else (self.devnull, None)
        actions = [(os.POSIX_SPAWN_DUP2, in_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1), (os.POSIX_SPAWN_DUP2, err_w, 2)]
        try:
            try:
                pid = self.spawn(argv, env, cwd, actions)
            except BlockingIOError:
                # Out of pids (EAGAIN): idle spares must never cost a call; free theirs and retry.
                if not self.drop_all_spares():
                    raise
                pid = self.spawn(argv, env, cwd, actions)
        except (OSError, ValueError, TypeError) as exc:
            for fd in (out_r, out_w, err_r, err_w) + ((in_r, in_w) if in_w is not None else ()):
                os.close(fd)
            if not isinstance(exc, OSError):  # e.g. bytes the kernel cannot take
                self.refuse(req_id, "toolfleet exec agent: cannot start the command: %s" % (exc,))
                return
            # Same codes a shell uses: 127 not found, 126 found but not executable.
            code = 127 if isinstance(exc, FileNotFoundError) else 126
            where = cwd if (cwd and not os.path.isdir(cwd)) else argv[0]
            message = ("%s: %s" % (exc.filename or where, exc.strerror)).encode()
            self.finish_raw(req_id, {"returncode": code, "timed_out": False, "truncated": False, "oom": False,
                                     "error": {"errno": exc.errno, "strerror": exc.strerror}}, b"", message)
            return
        os.close(out_w)
        os.close(err_w)
        if has_input:
            os.close(in_r)
        self.add_job(req_id, pid, spec, out_r, err_r, in_w if has_input else None, stdin_data, received)
        if key is not None:
            self.want_refill(key)

    def spawn(self, argv, env, cwd, actions):
        here = None
        try:
            if cwd:
                # Single-threaded: changing our cwd around the spawn cannot race with anything.
                here = os.open(".", os.O_RDONLY)
                os.chdir(cwd)
            path = argv[0]
            if "/" not in path and env is not os.environ:
                path = shutil.which(path, path=env.get("PATH")) or path  # look up with the command's PATH
            pid = os.posix_spawnp(path, argv, env, file_actions=actions, setsid=True, setsigdef=DEFAULT_SIGNALS)
        finally:
            if here is not None:
                os.fchdir(here)
                os.close(here)
        self.remember_session(pid)
        return pid

    def add_job(self, req_id, pid, spec, out_r, err_r, in_w, stdin_data, received):
        job = Job(req_id, pid, int(spec.get("cap") or DEFAULT_CAP), spec.get("timeout"), received)
        self.jobs[req_id] = job
        self.sel.register(out_r, selectors.EVENT_READ, ("out", (job, 1)))
        self.sel.register(err_r, selectors.EVENT_READ, ("out", (job, 2)))
        if in_w is not None:
            if stdin_data:
                os.set_blocking(in_w, False)
                job.stdin_fd, job.pending = in_w, memoryview(stdin_data)
                self.sel.register(in_w, selectors.EVENT_WRITE, ("in", job))
            else:
                os.close(in_w)
        return job

    # --- warm spares ------------------------------------------------------------------------------

    def warm_key(self, spec, stdin_data):
        if not spec.get("spares") or spec["argv"] != PYTHON_ARGV or not spec.get("input"):
            return None
        if b"coding" in b"\n".join(stdin_data.split(b"\n", 2)[:2]):
            # A PEP 263 cookie: CPython reads stdin source differently from compile() (it rejects
            # non-UTF-8 cookies there), so such code runs cold to behave exactly as before.
            return None
        return json.dumps([spec.get("cwd"), spec.get("env") or {}], sort_keys=True)

    def take(self, req_id, key, spec, stdin_data, received):
        """Hand the call to a live, up-to-date spare; False when there is none (spawn cold)."""
        pool = self.spares.pop(key, None)
        if pool is None:
            return False
        self.spares[key] = pool  # most recently used now
        current = {}  # paths -> stamp: spares of one key usually share their path list
        while pool:
            spare = pool.pop(0)
            if spare.paths not in current:
                current[spare.paths] = stamp(spare.paths)
            try:
                gone = os.waitpid(spare.pid, os.WNOHANG)[0] != 0  # e.g. a call's `pkill python3`
            except ChildProcessError:
                gone = True
            stale = current[spare.paths] != spare.stamp
            if stale:
                self.spare_env[key][2] = None  # new files may need watching: recompute the list
            if gone or stale:
                self.discard(spare, reaped=gone)
                continue
            job = self.add_job(req_id, spare.pid, spec, spare.out_r, spare.err_r, spare.in_w, stdin_data, received)
            job.retry = (spec, stdin_data, spare.in_r)
            self.want_refill(key)
            return True
        self.want_refill(key)
        return False

    def starved(self):
        return any(not self.spares.get(key) for key in self.refills)

    def want_refill(self, key):
        if key not in self.refills:
            self.refills.append(key)

    def refill(self):
        """Start one spare for the first key that lacks one (called when the loop is idle)."""
        while self.refills:
            key = self.refills[0]
            env, cwd, paths, wanted = self.spare_env[key]
            pool = self.spares.setdefault(key, [])
            if len(pool) >= wanted:
                self.refills.pop(0)
                continue
            if paths is None:
                paths = self.spare_env[key][2] = tuple(stamp_paths(env))
            spare = self.spawn_spare(env, cwd, paths)
            if spare is None:  # e.g. the pids limit: run cold until a later call retries
                self.refills.pop(0)
                return
            pool.append(spare)
            while len(self.spares) > MAX_WARM_KEYS:
                old = next(iter(self.spares))
                for dead in self.spares.pop(old):
                    self.discard(dead)
            return

    def spawn_spare(self, env, cwd, paths):
        stamp_ = stamp(paths)  # taken before the spawn: a later change always invalidates it
        boot_r, boot_w = os.pipe()
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        err_r, err_w = os.pipe()
        actions = [(os.POSIX_SPAWN_DUP2, boot_r, 0), (os.POSIX_SPAWN_DUP2, out_w, 1),
                   (os.POSIX_SPAWN_DUP2, err_w, 2), (os.POSIX_SPAWN_DUP2, in_r, 3)]
        try:
            pid = self.spawn(PYTHON_ARGV, env, cwd, actions)
        except OSError:
            for fd in (boot_r, boot_w, in_r, in_w, out_r, out_w, err_r, err_w):
                os.close(fd)
            return None
        for fd in (boot_r, out_w, err_w):
            os.close(fd)  # in_r stays: finish() asks it whether the spare ever read its code
        with contextlib.suppress(OSError):  # the spare died already; take() notices
            os.write(boot_w, BOOT)  # far below a pipe's capacity: never blocks
        os.close(boot_w)
        return Spare(pid, out_r, err_r, in_r, in_w, paths, stamp_)

    def discard(self, spare, reaped=False):
        if not reaped:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(spare.pid, signal.SIGKILL)
            self.dying.add(spare.pid)
        for fd in (spare.out_r, spare.err_r, spare.in_r, spare.in_w):
            os.close(fd)

    def drop_all_spares(self):
        """Kill every idle spare and wait (bounded) until their pids are free; False if none."""
        spares = [s for pool in self.spares.values() for s in pool]
        self.spares.clear()
        for spare in spares:
            self.discard(spare)
        deadline = time.monotonic() + 0.5
        while self.dying and time.monotonic() < deadline:
            self.reap_dying()
            time.sleep(0.005)
        return bool(spares)

    def reap_dying(self):
        for pid in list(self.dying):
            try:
                done = os.waitpid(pid, os.WNOHANG)[0] != 0
            except ChildProcessError:
                done = True
            if done:
                self.dying.discard(pid)

    def remember_session(self, pid):
        # Every command leads its own session; what it leaves running in the background is killed
        # when the agent stops (the local driver has no container to take it down).
        self.sessions[pid] = start_time(pid)
        if len(self.sessions) > 10000:
            self.sessions.pop(next(iter(self.sessions)))

    def kill_sessions(self):
        for pid, started in self.sessions.items():
            now = start_time(pid)
            if now is not None and now != started:
                continue  # the pid was reused by an unrelated process
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(pid, signal.SIGKILL)  # a pgid in use is never reused, so this is ours

    def on_output(self, fd, job, stream):
        chunk = os.read(fd, CHUNK)
        if not chunk:
            self.sel.unregister(fd)
            os.close(fd)
            job.open_reads -= 1
            return
        job.bufs[stream].add(chunk)  # bounded; keeps draining so the writer never blocks

    def on_input(self, job):
        try:
            n = os.write(job.stdin_fd, job.pending[:CHUNK])
        except BlockingIOError:
            return
        except OSError:  # the command closed its stdin
            n = len(job.pending)
        job.pending = job.pending[n:]
        if not len(job.pending):
            self.close_stdin(job)

    def close_stdin(self, job):
        if job.stdin_fd is not None:
            self.sel.unregister(job.stdin_fd)
            os.close(job.stdin_fd)
            job.stdin_fd = None

    def reap(self):
        self.reap_dying()
        now = time.monotonic()
        for job in self.jobs.values():
            if job.code is None:
                try:
                    pid, status = os.waitpid(job.pid, os.WNOHANG)
                except ChildProcessError:
                    pid, status = job.pid, 0
                if pid:
                    job.code = os.waitstatus_to_exitcode(status)
                    job.exited_at = now

    def tick(self):
        """Deadlines, finished jobs; returns how long the selector may sleep."""
        now = time.monotonic()
        wait = None
        for job in list(self.jobs.values()):
            if job.deadline is not None and now >= job.deadline:
                job.timed_out = True
                job.deadline = None
                job.kill()
            if job.code is not None and (job.open_reads == 0 or now - job.exited_at > EXIT_GRACE):
                self.finish(job)
                continue
            for t in (job.deadline, job.exited_at + EXIT_GRACE if job.exited_at is not None else None):
                if t is not None:
                    wait = max(0.0, t - now) if wait is None else min(wait, max(0.0, t - now))
        return wait

    def finish(self, job):
        del self.jobs[job.req_id]
        self.close_stdin(job)
        for key in list(self.sel.get_map().values()):
            if key.data[0] == "out" and key.data[1][0] is job:
                self.sel.unregister(key.fd)
                os.close(key.fd)
        code = job.code
        if job.retry is not None:
            spec, data, in_r = job.retry
            unread = unread_bytes(in_r)
            unsent = len(job.pending) if job.pending is not None else 0  # its death may be seen before the write
            os.close(in_r)
            # Killed before it read (all of) its code — e.g. by a previous call's `pkill python3`
            # just before this call took it: the code never ran (`python3 -` runs nothing before EOF),
            # so run it cold, as if the spare had not existed. (Empty code has no effects either, so
            # rerunning it is harmless.)
            if code < 0 and not job.timed_out and (unread or unsent or not data):
                self.start(job.req_id, dict(spec, spares=0), data, job.received)
                return
        out, err = job.bufs[1], job.bufs[2]
        status = {"returncode": 128 - code if code < 0 else code, "timed_out": job.timed_out,
                  "truncated": out.truncated or err.truncated, "oom": False,
                  "stdout_total": out.total, "stderr_total": err.total,
                  "agent_seconds": round(time.monotonic() - job.received, 6)}
        if code == -signal.SIGKILL and not job.timed_out:
            now = oom_kills()
            status["oom"] = now is not None and self.oom_seen is not None and now > self.oom_seen
            self.oom_seen = now
            status["oom_kills"] = now
        self.finish_raw(job.req_id, status, out.value(), err.value())

    def finish_raw(self, req_id, status, out, err):
        status["stdout_len"] = len(out)
        head = json.dumps(status).encode()
        self.send(req_id, RESULT, U32.pack(len(head)) + head + out + err)

    # --- loop ---------------------------------------------------------------------------------

    def run(self):
        while self.running:
            wait = self.tick()
            # Refill only when idle and no call is running: a spare's start-up is CPU-heavy and the
            # sandbox's CPU quota is the call's; under sustained load a key with no spare left
            # still gets one, so concurrent calls keep some warm processes.
            refill = bool(self.refills) and (not self.jobs or self.starved())
            events = self.sel.select(0 if refill else wait)
            if not events and refill:
                self.refill()
            for key, _ in events:
                kind, data = key.data
                if kind == "out":
                    self.on_output(key.fd, *data)
                elif kind == "chan":
                    self.on_channel(data)
                elif kind == "in":
                    self.on_input(data)
                else:
                    with contextlib.suppress(BlockingIOError):
                        os.read(key.fd, 4096)
                    self.reap()
        for job in self.jobs.values():  # the host is gone: nothing may outlive the channel
            job.kill()
        for pool in self.spares.values():
            for spare in pool:
                self.discard(spare)
        self.kill_sessions()


if __name__ == "__main__":
    Agent().run()
