"""`lo-orch dashboard --serve`: the dashboard in a browser, behind a token.

The host rule and the page are plain functions, tested in milliseconds; the real command
is served and opened in headless Chromium (driven over the DevTools protocol): the page
shows the task table (the app's screen, as the websocket carried it, and a screenshot), every
request it made went to this server with the token, and the same address without the token
is refused, for the page, the websocket and the static files alike.
"""

from __future__ import annotations

import asyncio
import base64
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

import aiohttp
import pytest
from helpers.browser import browser
from helpers.cli import invoke
from helpers.wait import wait_for, wait_in_app
from textual_serve.download_manager import DownloadManager

from loop_orchestrator.commands.plan import plan_from_file
from loop_orchestrator.dashboard import web
from loop_orchestrator.errors import UsageError
from loop_orchestrator.runstate.state import Phase, Store
from loop_orchestrator.simulator import demo_flow as demo


@pytest.mark.parametrize("host", ["127.0.0.1", "127.0.0.2", "localhost", "::1"])
def test_a_loopback_host_is_served_without_a_warning(host: str) -> None:
    assert web.check_host(host, allow_remote=False) is None


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.7", "::", "example.org"])
def test_another_host_needs_the_flag_and_is_warned_about(host: str) -> None:
    with pytest.raises(UsageError) as refused:
        web.check_host(host, allow_remote=False)
    assert host in refused.value.message and "--allow-remote" in (refused.value.hint or "")
    warning = web.check_host(host, allow_remote=True)
    assert warning and host in warning and "merge" in warning


def test_the_page_loads_nothing_from_another_host() -> None:
    html = web.page("tok", "lo-orch dashboard: <repo>")
    assert re.findall(r"https?://", html) == []  # no CDN, no web font service
    paths = re.findall(r'(?:src|href)="([^"]+)"', html) + re.findall(r'url\("([^"]+)"\)', html)
    assert paths and all(p.startswith("/tok/static/") for p in paths)
    for p in paths:  # each is a file of the installed textual-serve
        assert (web.STATIC / p.removeprefix("/tok/static/")).is_file(), p
    assert "&lt;repo&gt;" in html


def test_cli_refuses_another_host_without_the_flag(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    got = invoke("dashboard", "--serve", "--host", "0.0.0.0", "--repo", git_repo)
    assert got.code == 2, got
    assert "not serving the dashboard on 0.0.0.0" in got.stderr
    assert "--host 0.0.0.0 --allow-remote" in got.stderr
    got = invoke("dashboard", "--host", "127.0.0.1", "--repo", git_repo)
    assert got.code == 2 and "go with --serve" in got.stderr, got
    # with the flag: the warning, then the next check (this repository has no run)
    got = invoke("dashboard", "--serve", "--host", "0.0.0.0", "--allow-remote", "--repo", git_repo)
    assert "Warning: the dashboard is served on 0.0.0.0" in got.stderr
    assert got.code == 1 and "lo-orch plan" in got.stderr, got
    # an agent session does not serve itself the gates
    monkeypatch.setenv("LO_ORCH_TASK", "slug")
    got = invoke("dashboard", "--serve", "--repo", git_repo)
    assert got.code != 0 and "inside a managed agent session" in got.stderr, got


def test_a_page_dashboard_that_does_not_quit_is_killed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A page's process that ignores textual-serve's quit (and SIGTERM) is killed, so no
    dashboard outlives its page or the server."""
    monkeypatch.setattr(web, "STOP_SECONDS", 0.5)
    stubborn = (
        "import signal, sys, time\n"
        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
        "print('__GANGLION__', flush=True)\n"
        "time.sleep(120)\n"
    )
    sent: list[bytes] = []

    async def write_bytes(data: bytes) -> None:
        sent.append(data)

    async def write_str(text: str) -> None:
        sent.append(text.encode())

    async def close() -> None:
        return None

    async def scenario() -> int | None:
        app = web.DashboardProcess(
            [sys.executable, "-c", stubborn],
            write_bytes=write_bytes,
            write_str=write_str,
            close=close,
            download_manager=DownloadManager(),
        )
        await app.start(80, 24)
        await app.end()
        assert app._process is not None
        return app._process.returncode

    started = time.monotonic()
    assert asyncio.run(scenario()) == -signal.SIGKILL
    assert time.monotonic() - started < 10


# the real command in a browser -----------------------------------------------------------


def _status(url: str) -> int:
    try:
        with urllib.request.urlopen(url, timeout=10) as got:
            return int(got.status)
    except urllib.error.HTTPError as refused:
        return refused.code


def _screen(frames: list[str]) -> str:
    """What the app wrote to the page's terminal (its binary frames, decoded), without the
    terminal's escape sequences."""
    out = []
    for f in frames:
        try:
            out.append(base64.b64decode(f, validate=True).decode("utf-8", "replace"))
        except ValueError:
            continue  # a text frame (the pings' answers)
    return re.sub(r"\x1b\[[0-9;?$]*[A-Za-z]|\x1b\][^\x07]*\x07", " ", "".join(out))


def test_the_served_dashboard_in_chromium_and_the_token_it_needs(
    tmp_path: Path, tmux_socket: str
) -> None:
    files = demo.prepare_demo(tmp_path / "demo")
    plan_from_file(files.repo, files.plan, demo.demo_settings(files.script))
    store = Store.for_repo(files.repo)
    st = store.read_status("slug")
    st.phase, st.usage = Phase.VERIFYING, {"cost_usd": 1.25, "input_tokens": 9}
    store.write_status(st)
    server = subprocess.Popen(
        [sys.executable, "-m", "loop_orchestrator", "dashboard", "--serve"],
        cwd=files.repo,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        first = server.stdout.readline()
        found = re.search(r"http://127\.0\.0\.1:(\d+)/([\w-]+)/", first)
        assert found, first + server.stderr.read() if server.stderr else first
        url, port, token = found.group(0), found.group(1), found.group(2)
        assert len(token) >= 32
        origin = f"127.0.0.1:{port}"
        bare = f"http://{origin}/"
        forged = f"http://{origin}/{token[:-1]}{'A' if token[-1] != 'A' else 'B'}/"

        # without the token (or with another one) nothing is served
        for path in ("", "ws", "static/js/textual.js", "static/css/xterm.css"):
            assert _status(bare + path) == 403, path
            assert _status(forged + path) == 403, path
            assert _status(f"http://{origin}/static/{path}") == 403, path
        assert _status(url) == 200 and _status(url + "static/js/textual.js") == 200

        async def websocket_refused() -> None:
            async with aiohttp.ClientSession() as http:
                with pytest.raises(aiohttp.WSServerHandshakeError) as refused:
                    await http.ws_connect(f"ws://{origin}/ws")
                assert refused.value.status == 403

        async def in_chromium() -> list[int]:
            async with browser(tmp_path / "profile") as page:
                await page.call("Page.navigate", url=bare)
                await wait_in_app(page, lambda: page.loaded == bare, 15, "the page without token")
                assert page.statuses[bare] == 403
                body = await page.evaluate("document.body.innerText")
                assert "Forbidden" in body and "lo-orch dashboard --serve" in body
                assert page.frames == []  # no app ran for it
                await page.call("Page.navigate", url=url)

                def shown() -> str:
                    return " ".join(_screen(page.frames).split())

                # the app starts in a process of its own: a few seconds
                await wait_in_app(
                    page,
                    lambda: "slug 1 verifying" in shown() and "q Quit" in shown(),
                    40,
                    "the task table in the page",
                    shown=lambda: shown()[-3000:],
                )
                for words in ("tokenize 1 pending", "slug 1 verifying", "report 3 pending"):
                    assert words in shown()
                assert "$1.2500" in shown()
                assert page.statuses[url] == 200
                assert await page.evaluate("document.body.classList.contains('-first-byte')")
                shot = await page.screenshot(tmp_path / "served.png")
                assert shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
                assert shot.stat().st_size > 20_000  # a screen of text, not a blank page
                # everything came from this server, with the token (the browser's own
                # favicon.ico request is the only one without it, and it was refused)
                hosts = {re.sub(r"^\w+://([^/]+)/.*$", r"\1", u) for u in page.requests}
                assert hosts == {origin}, page.requests
                untokened = [u for u in page.requests if f"/{token}/" not in u]
                assert set(untokened) <= {f"http://{origin}/favicon.ico", bare}, untokened
                assert f"ws://{origin}/{token}/ws" in " ".join(page.requests)
                # the page's own dashboard process, a child of the server
                kids = _children_of(server.pid)
                assert kids
                return kids

        asyncio.run(websocket_refused())
        kids = asyncio.run(in_chromium())
    finally:
        server.send_signal(signal.SIGINT)
        try:
            server.wait(20)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
    assert server.returncode == 0, server.stderr.read() if server.stderr else ""
    # the page's dashboard process ended (its page closed, and the server with it)
    wait_for(lambda: not any(_alive(k) for k in kids), 10, "the served dashboards to end")


def _stat(pid: int) -> list[str] | None:
    """A process's /proc stat fields after its name (state, parent, ...); None when gone."""
    try:
        return (Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _alive(pid: int) -> bool:
    fields = _stat(pid)
    return fields is not None and fields[0] != "Z"


def _children_of(pid: int) -> list[int]:
    """Processes whose parent is ``pid``."""
    kids = []
    for p in Path("/proc").iterdir():
        if p.name.isdigit() and (fields := _stat(int(p.name))) and int(fields[1]) == pid:
            kids.append(int(p.name))
    return kids
