"""`lo-orch dashboard --serve`: the same dashboard in a browser.

Each browser page that connects gets its own dashboard process (`lo-orch dashboard` under
Textual's web driver, spoken to through textual-serve's ``AppService``), so its keys call
the same command functions as in a terminal. A page's process ends when its page closes
(killed if it has not quit within ``STOP_SECONDS``), and every one ends with the server.
The page, its script and styles (textual-serve's own, with a font it ships) are served from
here: nothing is loaded from another host.

Every request, the page, the websocket and each static file, carries the server's random
token as the first part of its path (``http://127.0.0.1:PORT/TOKEN/``); any other request is
refused with 403. The server listens on 127.0.0.1 unless told otherwise; a host that is not
a loopback address needs ``allow_remote`` and is warned about, since whoever has the URL can
pass the gates.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import html
import ipaddress
import secrets
import shlex
import signal
import sys
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import textual_serve
from aiohttp import WSMsgType, web
from textual_serve.app_service import AppService
from textual_serve.download_manager import DownloadManager

from loop_orchestrator import proc
from loop_orchestrator.errors import UsageError
from loop_orchestrator.runstate.state import Store
from loop_orchestrator.sessions.guard import refuse_in_session

DEFAULT_HOST = "127.0.0.1"
#: how long a page's dashboard has to quit once its page closed (then it is killed)
STOP_SECONDS = 5.0
#: textual-serve's script, styles and font, served as they are
STATIC = Path(textual_serve.__file__).parent / "static"
REFUSED = (
    "Forbidden: this dashboard's address carries a token; open the URL that "
    "`lo-orch dashboard --serve` printed.\n"
)
WARNING = (
    "Warning: the dashboard is served on {host}, not only to this machine: anyone who can "
    "reach it and has the URL can approve the plan and merge the run. Nothing encrypts it "
    "(plain http)."
)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Served:
    """Where the dashboard is served."""

    host: str
    port: int
    token: str

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/{self.token}/"


def is_loopback(host: str) -> bool:
    """``host`` names only this machine (``localhost``, 127.0.0.0/8, ``::1``)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_host(host: str, *, allow_remote: bool) -> str | None:
    """The warning to print for ``host`` (None for a loopback one); a host that is not a
    loopback address without ``allow_remote`` is refused."""
    if is_loopback(host):
        return None
    if not allow_remote:
        msg = f"not serving the dashboard on {host}: it would be reachable from other machines"
        raise UsageError(
            msg,
            hint=f"Serve it on {DEFAULT_HOST} (the default) and open it from this machine, or "
            f"pass `--host {host} --allow-remote` if you mean it.",
        )
    return WARNING.format(host=host)


def page(token: str, title: str) -> str:
    """The page: textual-serve's terminal element and script, with this server's paths."""
    base = f"/{token}"
    return f"""<!DOCTYPE html>
<html>
  <head>
    <meta charset="utf-8">
    <title>{html.escape(title)}</title>
    <link rel="stylesheet" href="{base}/static/css/xterm.css">
    <script src="{base}/static/js/textual.js"></script>
    <style>
      @font-face {{
        font-family: "Roboto Mono";
        src: url("{base}/static/fonts/RobotoMono-VariableFont_wght.ttf");
      }}
      html, body {{ margin: 0; height: 100%; background: #0c181f; }}
      #terminal {{ width: 100vw; height: 100vh; }}
    </style>
  </head>
  <body>
    <div id="terminal" class="textual-terminal" data-font-size="16"
         data-session-websocket-url="{base}/ws"></div>
    <script>
      // the websocket's address as textual.js wants it: absolute, on this page's host
      const term = document.getElementById("terminal");
      const scheme = location.protocol === "https:" ? "wss://" : "ws://";
      term.dataset.sessionWebsocketUrl = scheme + location.host + "{base}/ws";
    </script>
  </body>
</html>
"""


class DashboardProcess(AppService):
    """textual-serve's ``AppService`` for one page, started from an argument list (it would
    start a shell command line) and killable."""

    def __init__(self, argv: list[str], **kwargs: Any) -> None:
        super().__init__(shlex.join(argv), **kwargs)
        self.argv = argv

    async def _open_app_process(
        self, width: int = 80, height: int = 24
    ) -> asyncio.subprocess.Process:
        env = self._build_environment(width=width, height=height)
        self._process = process = await proc.start_piped(self.argv, env)
        assert process.stdin is not None
        self._stdin = process.stdin
        return process

    async def end(self) -> None:
        """Ask the dashboard to quit; kill it when it has not within ``STOP_SECONDS``."""
        try:
            await asyncio.wait_for(self.stop(), STOP_SECONDS)
        except TimeoutError:
            pass
        finally:
            process = self._process
            if process is not None and process.returncode is None:
                process.kill()
                await process.wait()


async def _relay(ws: web.WebSocketResponse, app: DashboardProcess) -> None:
    """The page's keys, size, focus and pings to its dashboard (textual.js's messages)."""
    async for message in ws:
        if message.type != WSMsgType.TEXT:
            continue
        kind, data = message.json()
        if kind == "stdin":
            await app.send_bytes(str(data).encode("utf-8"))
        elif kind == "resize":
            await app.set_terminal_size(int(data["width"]), int(data["height"]))
        elif kind == "ping":
            await ws.send_json(["pong", data])
        elif kind == "blur":
            await app.blur()
        elif kind == "focus":
            await app.focus()


def make_app(repo: Path, token: str) -> web.Application:
    """The web application: the page, the websocket and the static files under
    ``/TOKEN/``, and a middleware that refuses every other request."""
    argv = [sys.executable, "-m", "loop_orchestrator", "dashboard", "--repo", str(repo)]
    downloads = DownloadManager()
    running: set[DashboardProcess] = set()
    title = f"lo-orch dashboard: {repo.name}"
    prefix = f"/{token}/"

    @web.middleware
    async def token_required(request: web.Request, handler: Handler) -> web.StreamResponse:
        given = request.path[: len(prefix)]
        if len(request.path) < len(prefix) or not hmac.compare_digest(
            given.encode(), prefix.encode()
        ):
            return web.Response(status=403, text=REFUSED)
        response = await handler(request)
        # the token is in the address: never pass it on, never keep it in a cache
        response.headers["Referrer-Policy"] = "no-referrer"
        response.headers["Cache-Control"] = "no-store"
        return response

    async def index(request: web.Request) -> web.Response:
        return web.Response(text=page(token, title), content_type="text/html")

    async def websocket(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse(heartbeat=15)
        await ws.prepare(request)
        app = DashboardProcess(
            argv,
            write_bytes=ws.send_bytes,
            write_str=ws.send_str,
            close=ws.close,
            download_manager=downloads,
        )
        running.add(app)
        try:
            await app.start(_size(request, "width", 80), _size(request, "height", 24))
            await _relay(ws, app)
        finally:
            running.discard(app)
            await app.end()
        return ws

    async def end_all(_: web.Application) -> None:
        await asyncio.gather(*(app.end() for app in list(running)))

    web_app = web.Application(middlewares=[token_required])
    web_app.add_routes(
        [
            web.get(prefix, index),
            web.get(f"{prefix}ws", websocket),
            web.static(f"{prefix}static", STATIC),
        ]
    )
    web_app.on_shutdown.append(end_all)
    return web_app


def _size(request: web.Request, name: str, default: int) -> int:
    try:
        return max(10, min(1000, int(request.query.get(name, default))))
    except ValueError:
        return default


async def _serve(
    repo: Path, host: str, port: int, token: str, started: Callable[[Served], None]
) -> None:
    runner = web.AppRunner(make_app(repo, token), handle_signals=False)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1] if runner.addresses else port
        started(Served(host, int(bound), token))
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(sig, stop.set)
        await stop.wait()
    finally:
        await runner.cleanup()


def serve(
    repo: Path,
    *,
    host: str = DEFAULT_HOST,
    port: int = 0,
    allow_remote: bool = False,
    started: Callable[[Served], None],
    warn: Callable[[str], None],
) -> None:
    """Serve the dashboard until SIGINT or SIGTERM; ``started`` is told where (``port`` 0:
    a free one), ``warn`` hears the warning for a host other machines reach."""
    refuse_in_session("lo-orch dashboard --serve")
    warning = check_host(host, allow_remote=allow_remote)
    if warning:
        warn(warning)
    Store.for_repo(repo).read_run()  # no run: the same clear error as `lo-orch status`
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_serve(repo, host, port, secrets.token_urlsafe(24), started))
