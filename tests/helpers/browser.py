"""Headless Chromium (Debian's ``chromium``, installed by ``scripts/bootstrap --browser``)
driven over the DevTools protocol, with aiohttp's websocket client: open a page, read it,
take a screenshot, and hear every request it made.

Chromium starts with a fresh profile in the test's own folder (its temporary folder is
removed when it ends), no sandbox (the tests may run as root), no GPU, and none of its
background connections (this machine has no network)."""

from __future__ import annotations

import asyncio
import base64
import contextlib
import itertools
import json
import os
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp

from helpers.wait import wait_for

CHROMIUM = "/usr/bin/chromium"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
)


def chromium() -> str:
    """Chromium's path; a clear failure when it is not installed."""
    found = shutil.which("chromium") or (CHROMIUM if Path(CHROMIUM).exists() else None)
    assert found, "Chromium is not installed: run `scripts/bootstrap --browser` (apt-get)"
    return found


class Page:
    """One page target of a running Chromium."""

    def __init__(self, ws: aiohttp.ClientWebSocketResponse) -> None:
        self.ws = ws
        self.ids = itertools.count(1)
        #: every request the page made over the network (Network.requestWillBeSent: http,
        #: https, ws, wss; not Chromium's own chrome:// pages), as URLs
        self.requests: list[str] = []
        #: websocket frames the page received, as text (Network.webSocketFrameReceived)
        self.frames: list[str] = []
        #: the status of each response the page got (Network.responseReceived), by URL
        self.statuses: dict[str, int] = {}
        #: the address of the main frame (Page.frameNavigated), and of the last one that
        #: finished loading (Page.loadEventFired)
        self.url = ""
        self.loaded = ""

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        n = next(self.ids)
        await self.ws.send_json({"id": n, "method": method, "params": params})
        while True:
            msg = await asyncio.wait_for(self.ws.receive_json(), 30)
            if msg.get("id") == n:
                assert "error" not in msg, f"{method}: {msg['error']}"
                result: dict[str, Any] = msg.get("result", {})
                return result
            self._event(msg)

    def _event(self, msg: dict[str, Any]) -> None:
        p = msg.get("params", {})
        if msg.get("method") == "Network.requestWillBeSent":
            if p["request"]["url"].startswith(("http:", "https:", "ws:", "wss:")):
                self.requests.append(p["request"]["url"])
        elif msg.get("method") == "Network.webSocketCreated":
            self.requests.append(p["url"])
        elif msg.get("method") == "Network.webSocketFrameReceived":
            self.frames.append(p["response"]["payloadData"])
        elif msg.get("method") == "Network.responseReceived":
            self.statuses[p["response"]["url"]] = int(p["response"]["status"])
        elif msg.get("method") == "Page.frameNavigated" and "parentId" not in p["frame"]:
            self.url = p["frame"]["url"]
        elif msg.get("method") == "Page.loadEventFired":
            self.loaded = self.url

    async def evaluate(self, expression: str) -> Any:
        got = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        return got["result"].get("value")

    async def pause(self, seconds: float) -> None:
        """Hear the page's events for ``seconds`` (so ``helpers.wait.wait_in_app`` waits on a
        page as on a Textual pilot)."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                while True:
                    self._event(await self.ws.receive_json())

    async def screenshot(self, path: Path) -> Path:
        shot = await self.call("Page.captureScreenshot", format="png")
        path.write_bytes(base64.b64decode(shot["data"]))
        return path


@contextlib.asynccontextmanager
async def browser(profile: Path, width: int = 1400, height: int = 900) -> AsyncIterator[Page]:
    """A headless Chromium with a fresh profile in ``profile``; its first page, with the
    network and page domains on. Chromium is stopped (by its pid) when the block ends."""
    profile.mkdir(parents=True)
    # it makes a folder in $TMPDIR for its singleton socket at every start and leaves it:
    # in one of ours, removed below (short: a socket's path has at most 107 bytes)
    tmp = Path(tempfile.mkdtemp(prefix="lo-chromium-", dir="/tmp"))
    proc = subprocess.Popen(
        [
            chromium(),
            *FLAGS,
            f"--user-data-dir={profile}",
            f"--window-size={width},{height}",
            "about:blank",  # not its new tab page, which loads pages of its own
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ, "TMPDIR": str(tmp)},
    )
    try:
        port_file = profile / "DevToolsActivePort"
        wait_for(port_file.exists, 30, "Chromium's DevTools port")
        wait_for(lambda: len(port_file.read_text().split()) >= 2, 5, "the whole port file")
        port = port_file.read_text().split()[0]
        async with aiohttp.ClientSession() as http:
            async with http.get(f"http://127.0.0.1:{port}/json/list") as got:
                targets = json.loads(await got.text())
            target = next(t for t in targets if t["type"] == "page")
            async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                page = Page(ws)
                await page.call("Page.enable")
                await page.call("Network.enable")
                yield page
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)
        shutil.rmtree(tmp, ignore_errors=True)
