"""`inspect view` opens a toolfleet log: a real eval writes ``--log-format eval``, Inspect's own viewer serves
the log directory, headless Chromium (Debian's package) loads the sample's Messages tab, and the page shows
the model's message. A screenshot is saved under /tmp (its path is printed; it is not committed).

Chromium is driven over the DevTools protocol with aiohttp (an inspect-ai dependency, so test-only here).
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest

from orchestrator.dataset import Sample
from orchestrator.eval import Task, eval_async
from orchestrator.model import get_model
from orchestrator.scorer import includes
from tests.support.fleet import free_port

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
INSPECT = shutil.which("inspect")
MARKER = "zebra-quartz code is ZQ-4417"
SCREENSHOT_DIR = Path("/tmp/toolfleet-inspect-view")

pytestmark = [pytest.mark.timeout(240)]


@pytest.fixture(autouse=True)
def _browser_and_viewer() -> None:
    """Prerequisites fail loudly (README: `toolfleet setup` installs chromium; inspect-ai is in `.[dev]`)."""
    if CHROMIUM is None:
        pytest.fail("chromium is not installed: run `toolfleet setup` or `apt-get install chromium`", pytrace=False)
    if INSPECT is None:
        pytest.fail("`inspect` is not on the PATH: install the test extras (`pip install -e '.[dev]'`)", pytrace=False)


async def _wait_http(url: str, timeout_s: float) -> Any:
    import aiohttp

    deadline = time.monotonic() + timeout_s
    async with aiohttp.ClientSession() as session:
        while True:
            try:
                async with session.get(url) as resp:
                    if resp.status == 200:
                        return await resp.json(content_type=None) if "/json" in url else True
            except (aiohttp.ClientError, OSError, json.JSONDecodeError):
                pass
            if time.monotonic() > deadline:
                raise AssertionError(f"{url} did not answer within {timeout_s}s")
            await asyncio.sleep(0.2)


class _Page:
    """The few DevTools-protocol calls this test needs."""

    def __init__(self, ws: Any) -> None:
        self.ws = ws
        self.next_id = 0

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        await self.ws.send_json({"id": self.next_id, "method": method, "params": params})
        while True:
            message = await asyncio.wait_for(self.ws.receive_json(), 30)
            if message.get("id") == self.next_id:
                assert "error" not in message, message
                return message.get("result", {})

    async def text(self) -> str:
        result = await self.call("Runtime.evaluate", expression="document.body ? document.body.innerText : ''",
                                 returnByValue=True)
        return str(result.get("result", {}).get("value", ""))


@pytest.mark.slow  # runs inspect view and a browser in child processes
async def test_inspect_view_shows_a_toolfleet_sample(tmp_path: Path) -> None:
    import aiohttp

    task = Task(dataset=[Sample(input="What is the zebra-quartz code?", target="ZQ-4417", id="zq")],
                scorer=includes(), name="viewer")
    [log] = await eval_async(task, get_model("scripted", outputs=[f"The {MARKER}."]), log_dir=tmp_path / "logs",
                             log_format="eval")
    eval_file = Path(log.location or "").with_suffix(".eval")
    assert eval_file.is_file()

    view_port, debug_port = free_port(), free_port()
    profile = tempfile.mkdtemp(prefix="toolfleet-chromium-")
    viewer = subprocess.Popen([INSPECT or "inspect", "view", "--log-dir", str(tmp_path / "logs"), "--host",
                               "127.0.0.1", "--port", str(view_port)], stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL, start_new_session=True)
    browser = subprocess.Popen([CHROMIUM or "chromium", "--headless=new", "--no-sandbox", "--disable-gpu",
                                "--disable-dev-shm-usage", f"--user-data-dir={profile}", "--window-size=1400,1000",
                                f"--remote-debugging-port={debug_port}", "about:blank"],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        await _wait_http(f"http://127.0.0.1:{view_port}/", 60)
        targets = await _wait_http(f"http://127.0.0.1:{debug_port}/json/list", 60)
        page_target = next(t for t in targets if t.get("type") == "page")
        url = (f"http://127.0.0.1:{view_port}/#/logs/{eval_file.name}/samples/sample/zq/1/messages")
        async with aiohttp.ClientSession() as session, \
                session.ws_connect(page_target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
            page = _Page(ws)
            await page.call("Page.enable")
            await page.call("Page.navigate", url=url)
            deadline = time.monotonic() + 90
            text = ""
            while MARKER not in text and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                text = await page.text()
            shot = await page.call("Page.captureScreenshot", format="png")
            # The transcript tab renders the events (the model event's output holds the same text).
            await page.call("Page.navigate", url=url.replace("/messages", "/transcript"))
            transcript = ""
            deadline = time.monotonic() + 90
            while "model call: scripted/scripted" not in transcript.lower() and time.monotonic() < deadline:
                await asyncio.sleep(0.5)
                transcript = await page.text()
        SCREENSHOT_DIR.mkdir(parents=True, exist_ok=True)
        screenshot = SCREENSHOT_DIR / f"sample-zq-{int(time.time())}.png"
        screenshot.write_bytes(base64.b64decode(shot["data"]))
        print(f"screenshot: {screenshot}")
        assert MARKER in text, f"the viewer did not show the sample's message; page text: {text[:500]!r}"
        assert "What is the zebra-quartz code?" in text  # the user's message too
        # The model event, with its output, as Inspect renders it.
        events_part = transcript.lower().split("model call: scripted/scripted", 1)
        assert len(events_part) == 2, f"the transcript tab did not render the events: {transcript[-500:]!r}"
        assert MARKER.lower() in events_part[1]
    finally:
        for proc in (browser, viewer):
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait(timeout=10)
        shutil.rmtree(profile, ignore_errors=True)
