"""The fast loop starts no process: a test that does must carry a marker that takes it out of the loop.

``python -m pytest -m "not docker and not celery and not slow"`` is the command to run between edits
(CONTRIBUTING.md). It stays fast only while everything that starts a process (a worker, a redis-server,
the local sandbox's exec agent, the ``toolfleet`` console script, the ``docker`` CLI, ...) is marked.
This plugin keeps the markers complete: Python's audit hooks report every process creation
(``subprocess.Popen``, ``os.system``, ``os.posix_spawn``, ``os.spawn``, ``os.fork``, ``os.forkpty``,
``os.exec``, ``pty.spawn``: the process events of the audit table), and a test that saw one while its
setup, call or teardown ran fails with ``spawns a process (<event> <argv0>) but is not marked slow``.

Which markers justify a spawn: ``slow`` (the mark for a test that starts processes or waits), and also
``docker`` and ``celery``. Those two are deselected by the same fast command, and what they stand for
starts processes (Celery workers and redis-server; the image build and the ``docker`` CLI), so the rule
enforced is exactly "the fast selection starts no process". A test that spawns and needs neither
service gets ``slow``; a ``docker`` test that only talks to the daemon through the SDK needs no ``slow``.

A fixture that spawned counts against every test that requests it, also when a later test gets it from
the cache of a wider scope (the first user set it up): mark the users, and the verdict does not depend
on test order. Only fixtures named in a test's closure are known; one fetched by ``getfixturevalue``
counts only when it spawns during that test. A spawn while a wider-scoped fixture is torn down (after
the last test that needed it) is charged to that fixture, not to the test that happens to be last.

Cost: an audit hook cannot be removed and runs on every audited event of the process (imports, file
opens, socket calls), so the hook is one set lookup, and does nothing while no test runs. Python 3.11
raises no audit event when ``multiprocessing`` starts a child with its ``spawn`` or ``forkserver``
method (its ``fork`` method is ``os.fork``), so that one helper is wrapped to raise one.

The process holds one hook for every pytest session in it (a ``pytester`` run inside a test): the
innermost session's guard receives the events, so a guard test's own runs are not charged to it.
"""

from __future__ import annotations

import os
import platform
import sys
import sysconfig
from collections.abc import Generator, Sequence
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

#: The markers that take a test out of the fast loop, each of which allows it to start processes.
JUSTIFYING_MARKERS = ("slow", "docker", "celery")

_STDLIB = sysconfig.get_paths()["stdlib"] + os.sep
_SITE = tuple({sysconfig.get_paths()[k] + os.sep for k in ("purelib", "platlib")})
MULTIPROCESSING_EVENT = "multiprocessing.spawnv_passfds"  # ours: raised by the wrapper below
SPAWN_EVENTS = frozenset({
    "subprocess.Popen", "os.system", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "os.exec",
    "pty.spawn", MULTIPROCESSING_EVENT,
})


def program(event: str, args: Sequence[Any]) -> str:
    """The program a spawn event starts, as a short name ('' when the event names none: a fork)."""
    if event in ("subprocess.Popen", "os.posix_spawn", "os.exec", MULTIPROCESSING_EVENT):
        path = args[0]  # Popen passes the resolved executable (the shell for shell=True)
    elif event == "os.spawn":
        path = args[1]  # (mode, path, args, env)
    elif event == "os.system":
        words = os.fsdecode(args[0]).split()
        path = words[0] if words else ""
    elif event == "pty.spawn":
        argv = args[0]
        path = argv if isinstance(argv, (str, bytes)) else (argv[0] if argv else "")
    else:
        return ""
    return os.path.basename(os.fsdecode(path))


class _Spawn:
    __slots__ = ("fixture", "what", "where")

    def __init__(self, what: str, where: str, fixture: pytest.FixtureDef[Any] | None) -> None:
        self.what = what  # "<event> <argv0>"
        self.where = where  # the innermost frame of the checkout that asked for it, "path:line"
        self.fixture = fixture  # the fixture being set up or torn down, if any


class SpawnGuard:
    """One pytest session's guard: what the running test spawned, and which wider fixtures spawn."""

    def __init__(self, rootdir: Path) -> None:
        self._root = str(rootdir) + os.sep
        self._item: pytest.Item | None = None
        self._spawns: list[_Spawn] = []  # charged to the running test
        self._tearing_down = False
        self._unclaimed: list[_Spawn] = []  # during teardown, until a fixture's finalizers are known done
        self._setting_up: list[pytest.FixtureDef[Any]] = []
        # (fixture, param index) -> its first spawn, for fixtures wider than one test (they are set up once)
        self._spawning: dict[tuple[pytest.FixtureDef[Any], int], _Spawn] = {}

    def saw(self, event: str, args: Sequence[Any]) -> None:
        if self._item is None:
            return
        fixture = self._setting_up[-1] if self._setting_up else None
        spawn = _Spawn(f"{event} {program(event, args)}".rstrip(), self._caller(), fixture)
        (self._unclaimed if self._tearing_down else self._spawns).append(spawn)

    def _caller(self) -> str:
        """Where the spawn was asked for: the innermost frame of the checkout, else of a library."""
        library = "?"
        frame: FrameType | None = sys._getframe(1)
        while frame is not None:
            filename = frame.f_code.co_filename
            if filename.startswith(self._root) and filename != __file__:
                return f"{filename[len(self._root):]}:{frame.f_lineno}"
            if library == "?" and (filename.startswith(_SITE) or not filename.startswith((_STDLIB, "<"))) \
                    and filename != __file__:
                library = f"{filename}:{frame.f_lineno}"
            frame = frame.f_back
        return library

    # --- the phases of one test ----------------------------------------------------------------

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_protocol(self, item: pytest.Item) -> Generator[None, object, object]:
        self._item, self._spawns, self._unclaimed = item, [], []
        try:
            return (yield)
        finally:
            self._item, self._tearing_down = None, False

    @pytest.hookimpl(wrapper=True)
    def pytest_fixture_setup(self, fixturedef: pytest.FixtureDef[Any],
                             request: pytest.FixtureRequest) -> Generator[None, object, object]:
        before = len(self._spawns)
        self._setting_up.append(fixturedef)
        try:
            return (yield)
        finally:
            self._setting_up.pop()
            if fixturedef.scope != "function":
                mine = [s for s in self._spawns[before:] if s.fixture is fixturedef]
                if mine:
                    self._spawning.setdefault((fixturedef, getattr(request, "param_index", 0)), mine[0])

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_call(self, item: pytest.Item) -> Generator[None, object, object]:
        result = yield  # a test that already failed keeps its own failure
        self._check(item, self._spawns + self._cached_spawns(item))
        return result

    @pytest.hookimpl(wrapper=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> Generator[None, object, object]:
        self._spawns, self._tearing_down = [], True
        try:
            result = yield  # a teardown that already failed keeps its own error
        finally:
            self._tearing_down = False
        # What no fixture's finalizers claimed came from the test's own finalizers.
        self._check(item, self._spawns + self._unclaimed)
        return result

    def pytest_fixture_post_finalizer(self, fixturedef: pytest.FixtureDef[Any], request: Any) -> None:
        # Called once a fixture's finalizers have run: the spawns since the previous call were its own.
        if not self._tearing_down or not self._unclaimed or self._item is None:
            return
        claimed, self._unclaimed = self._unclaimed, []
        for spawn in claimed:
            spawn.fixture = fixturedef
        if fixturedef.scope == "function" or fixturedef in self._closure(self._item):
            self._spawns.extend(claimed)
        else:  # a wider fixture torn down after its last user: its users answer for it
            self._spawning.setdefault((fixturedef, getattr(request, "param_index", 0)), claimed[0])

    # --- verdicts ------------------------------------------------------------------------------

    @staticmethod
    def _closure(item: pytest.Item) -> list[pytest.FixtureDef[Any]]:
        """The fixtures the test requests (its static closure, autouse ones included)."""
        info = getattr(item, "_fixtureinfo", None)  # pytest's record of the item's fixtures (no public form)
        if info is None:
            return []
        return [defs[-1] for name in getattr(item, "fixturenames", ()) if (defs := info.name2fixturedefs.get(name))]

    def _cached_spawns(self, item: pytest.Item) -> list[_Spawn]:
        """Spawns of wider-scoped fixtures the test requests, set up (or torn down) for an earlier test."""
        if not self._spawning:
            return []
        indices = getattr(getattr(item, "callspec", None), "indices", {})
        found = []
        for fixturedef in self._closure(item):
            spawn = self._spawning.get((fixturedef, indices.get(fixturedef.argname, 0)))
            if spawn is not None and spawn not in self._spawns:
                found.append(spawn)
        return found

    def _check(self, item: pytest.Item, spawns: list[_Spawn]) -> None:
        if not spawns or any(item.get_closest_marker(m) for m in JUSTIFYING_MARKERS):
            return
        first = spawns[0]
        via = f" in fixture {first.fixture.argname}" if first.fixture is not None else ""
        more = f"; {len(spawns) - 1} more" if len(spawns) > 1 else ""
        pytest.fail(f"{item.nodeid} spawns a process ({first.what}{via}, from {first.where}{more}) "
                    f"but is not marked slow", pytrace=False)


# --- the plugin: one audit hook per process, one guard per pytest session ---------------------------

_GUARDS: list[SpawnGuard] = []  # sessions nest (pytester runs pytest inside a test): the last one listens
_installed = False


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if event in SPAWN_EVENTS and _GUARDS:
        _GUARDS[-1].saw(event, args)


def _install_once() -> None:
    global _installed
    if _installed:
        return
    _installed = True
    sys.addaudithook(_audit)
    import multiprocessing.util as mp_util

    original = mp_util.spawnv_passfds

    def spawnv_passfds(path, args, passfds):
        sys.audit(MULTIPROCESSING_EVENT, path, args)
        return original(path, args, passfds)

    mp_util.spawnv_passfds = spawnv_passfds


_KEY = pytest.StashKey[SpawnGuard]()


def pytest_configure(config: pytest.Config) -> None:
    # Once per process, before any test: `platform.platform()` runs `uname -p` the first time and caches it,
    # and the openai SDK calls it for its first client's headers: charged to whichever test came first.
    platform.platform()
    _install_once()
    guard = config.stash[_KEY] = SpawnGuard(config.rootpath)
    config.pluginmanager.register(guard, "spawn-guard")
    _GUARDS.append(guard)


def pytest_unconfigure(config: pytest.Config) -> None:
    guard = config.stash.get(_KEY, None)
    if guard is not None:
        _GUARDS.remove(guard)
