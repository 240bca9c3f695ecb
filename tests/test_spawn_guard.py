"""The spawn guard (``tests/support/spawn_guard.py``): pytest run in-process on small test files.

Most cases raise the audit events with ``sys.audit`` (the very call CPython makes before it starts a
process, reaching the same hook) so they start nothing and stay in the fast loop; the last test starts
real processes through each API and is ``slow`` itself.
"""

from __future__ import annotations

import textwrap

import pytest

from tests.support.spawn_guard import program

pytest_plugins = ["pytester"]

PLUGIN = "tests.support.spawn_guard"


@pytest.mark.parametrize(("event", "args", "name"), [
    ("subprocess.Popen", ("/usr/bin/redis-server", ["redis-server", "--port", "1"], None, None), "redis-server"),
    ("subprocess.Popen", (b"/bin/sh", [b"/bin/sh", b"-c", b"true"], None, None), "sh"),
    ("os.system", ("ls -l /tmp",), "ls"),
    ("os.system", (b"  echo hi",), "echo"),
    ("os.system", ("",), ""),
    ("os.posix_spawn", ("/usr/bin/env", ["env"], {}), "env"),
    ("os.spawn", (0, "/bin/true", ["true"], {}), "true"),
    ("os.exec", ("/usr/bin/python3", ["python3", "-c", "pass"], None), "python3"),
    ("pty.spawn", (["bash", "-i"],), "bash"),
    ("pty.spawn", ("bash",), "bash"),
    ("os.fork", (), ""),
    ("os.forkpty", (), ""),
    ("multiprocessing.spawnv_passfds", ("/usr/bin/python3", ["python3", "-c", "x"]), "python3"),
])
def test_program_named_by_each_event(event: str, args: tuple[object, ...], name: str) -> None:
    assert program(event, args) == name


def _run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makeini(textwrap.dedent("""
        [pytest]
        asyncio_default_fixture_loop_scope = function
        markers =
            slow: starts processes
            docker: needs Docker
            celery: needs workers
    """))
    pytester.makepyfile(test_inner=textwrap.dedent(source))
    return pytester.runpytest_inprocess("-p", PLUGIN, "-p", "no:cacheprovider", *args)


def test_an_unmarked_test_that_spawns_fails_and_marked_ones_pass(pytester: pytest.Pytester) -> None:
    result = _run(pytester, """
        import sys
        import pytest

        def spawn():
            sys.audit("subprocess.Popen", "/usr/bin/redis-server", ["redis-server"], None, None)

        def test_unmarked():
            spawn()

        @pytest.mark.slow
        def test_slow():
            spawn()

        @pytest.mark.docker
        def test_docker():
            spawn()

        @pytest.mark.celery
        def test_celery():
            spawn()

        @pytest.mark.parametrize("kind", ["local", pytest.param("container", marks=pytest.mark.docker)])
        def test_only_one_variant_is_marked(kind):
            spawn()

        def test_spawns_nothing():
            pass
    """)
    result.assert_outcomes(passed=5, failed=2)
    result.stdout.fnmatch_lines([
        ("*test_inner.py::test_unmarked spawns a process (subprocess.Popen redis-server, from test_inner.py:5)"
         " but is not marked slow"),
        ("*test_inner.py::test_only_one_variant_is_marked[[]local[]] spawns a process (subprocess.Popen redis-server,"
         " from test_inner.py:5) but is not marked slow"),
    ])


@pytest.mark.parametrize(("call", "shown"), [
    ('sys.audit("os.system", "ls -l")', "os.system ls"),
    ('sys.audit("os.posix_spawn", "/usr/bin/env", ["env"], {})', "os.posix_spawn env"),
    ('sys.audit("os.spawn", 0, "/bin/true", ["true"], {})', "os.spawn true"),
    ('sys.audit("os.exec", "/bin/true", ["true"], None)', "os.exec true"),
    ('sys.audit("pty.spawn", ["bash"])', "pty.spawn bash"),
    ('sys.audit("os.fork")', "os.fork"),
    ('sys.audit("os.forkpty")', "os.forkpty"),
])
def test_every_process_event_is_seen(pytester: pytest.Pytester, call: str, shown: str) -> None:
    result = _run(pytester, f"""
        import sys

        def test_unmarked():
            {call}
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([f"*test_unmarked spawns a process ({shown}, from test_inner.py:4)*"])


def test_other_events_and_spawns_outside_a_test_are_ignored(pytester: pytest.Pytester) -> None:
    pytester.makeconftest("""
        import sys

        def pytest_sessionfinish(session):
            sys.audit("os.system", "true")  # after the last test
    """)
    result = _run(pytester, """
        import sys

        sys.audit("subprocess.Popen", "/bin/true", ["true"], None, None)  # while collecting: no test runs

        def test_unmarked():
            sys.audit("open", "/etc/hostname", "r", 0)
            sys.audit("socket.connect", None, ("127.0.0.1", 1))
    """)
    result.assert_outcomes(passed=1)


def test_a_spawning_fixture_counts_against_every_test_that_requests_it(pytester: pytest.Pytester) -> None:
    result = _run(pytester, """
        import sys
        import pytest

        @pytest.fixture(scope="session")
        def server():
            sys.audit("subprocess.Popen", "/usr/bin/redis-server", ["redis-server"], None, None)
            yield "up"

        @pytest.fixture
        def client(server):
            return server

        @pytest.mark.slow
        def test_first_user_is_marked(server):
            pass

        def test_later_user_gets_it_from_the_cache(server):
            pass

        def test_later_user_through_another_fixture(client):
            pass

        def test_not_a_user():
            pass
    """)
    result.assert_outcomes(passed=2, failed=2)
    result.stdout.fnmatch_lines([
        ("*::test_later_user_gets_it_from_the_cache spawns a process (subprocess.Popen redis-server in fixture server,"
         " from test_inner.py:6) but is not marked slow"),
        ("*::test_later_user_through_another_fixture spawns a process "
         "(subprocess.Popen redis-server in fixture server,*"),
    ])


def test_teardown_spawns_are_charged_to_their_fixture(pytester: pytest.Pytester) -> None:
    result = _run(pytester, """
        import sys
        import pytest

        @pytest.fixture(scope="session")
        def stopped_by_a_command():
            yield
            sys.audit("subprocess.Popen", "/usr/bin/redis-cli", ["redis-cli", "shutdown"], None, None)

        @pytest.fixture
        def cleaned_by_a_command():
            yield
            sys.audit("os.system", "rm -rf /tmp/nothing-here")

        @pytest.mark.slow
        def test_marked_user(stopped_by_a_command):
            pass

        def test_unmarked_function_fixture_user(cleaned_by_a_command):
            pass

        def test_unrelated_last_test():  # the session fixture is torn down after it
            pass
    """)
    # The function-scoped fixture's spawn is its test's (an error in teardown); the session fixture's is not
    # charged to the unrelated test that happened to run last.
    result.assert_outcomes(passed=3, errors=1)
    result.stdout.fnmatch_lines([
        ("*::test_unmarked_function_fixture_user spawns a process (os.system rm in fixture cleaned_by_a_command,"
         " from test_inner.py:12) but is not marked slow"),
    ])


def test_a_failing_test_keeps_its_own_failure(pytester: pytest.Pytester) -> None:
    result = _run(pytester, """
        import sys

        def test_unmarked():
            sys.audit("os.system", "true")
            assert 1 == 2, "the real failure"
    """)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["*AssertionError: the real failure*"])
    result.stdout.no_fnmatch_line("*spawns a process*")


@pytest.mark.slow  # starts real processes (in the inner session, which its own guard watches)
def test_real_spawns_through_each_api(pytester: pytest.Pytester) -> None:
    result = _run(pytester, """
        import asyncio
        import multiprocessing.util
        import os
        import subprocess
        import pytest

        def test_subprocess():
            subprocess.run(["true"], check=True)

        def test_os_system():
            assert os.system("true") == 0

        def test_posix_spawn():
            os.waitpid(os.posix_spawnp("true", ["true"], os.environ), 0)

        def test_asyncio():
            async def main():
                proc = await asyncio.create_subprocess_exec("true")
                await proc.wait()
            asyncio.run(main())

        def test_multiprocessing_spawn_method():
            os.waitpid(multiprocessing.util.spawnv_passfds(b"/bin/true", [b"true"], ()), 0)

        @pytest.mark.slow
        def test_marked():
            subprocess.run(["true"], check=True)
    """)
    result.assert_outcomes(passed=1, failed=5)
    result.stdout.fnmatch_lines_random([
        "*::test_subprocess spawns a process (subprocess.Popen true, from test_inner.py:*) but is not marked slow",
        "*::test_os_system spawns a process (os.system true, *",
        "*::test_posix_spawn spawns a process (os.posix_spawn true, *",
        "*::test_asyncio spawns a process (subprocess.Popen true, *",
        "*::test_multiprocessing_spawn_method spawns a process (multiprocessing.spawnv_passfds true, *",
    ])
