"""`lo-orch dashboard`: the full-screen view (a front end of its own, ``dashboard/``)."""

from __future__ import annotations

from pathlib import Path

import click

from loop_orchestrator.cli.common import echo, repo_option, resolve_repo
from loop_orchestrator.errors import UsageError


@click.command("dashboard")
@repo_option
@click.option(
    "--serve", is_flag=True, help="Serve the dashboard to a browser instead (see --host, --port)."
)
@click.option(
    "--host",
    default=None,
    help="With --serve: the address to listen on (default 127.0.0.1, this machine only).",
)
@click.option(
    "--port",
    type=click.IntRange(0, 65535),
    default=0,
    help="With --serve: the port (default: a free one).",
)
@click.option(
    "--allow-remote",
    is_flag=True,
    help="With --serve: allow a --host that other machines reach (a warning is printed).",
)
def dashboard_command(
    repo: Path | None, serve: bool, host: str | None, port: int, allow_remote: bool
) -> None:
    """A full-screen live view of the run: what needs you, every task, the selected task's
    pane, brief, review and ledger; keys (shown in the footer) attach, send, retry and pass
    the gates. `q` quits. With --serve, the same view in a browser, at a URL with a random
    token that every request must carry; Ctrl-C stops it."""
    if not serve and (host is not None or port or allow_remote):
        msg = "--host, --port and --allow-remote go with --serve"
        raise UsageError(msg, hint="Run `lo-orch dashboard --serve --host ...`.")
    path = resolve_repo(repo)
    if serve:
        from loop_orchestrator.dashboard import web

        web.serve(
            path,
            host=host or web.DEFAULT_HOST,
            port=port,
            allow_remote=allow_remote,
            started=lambda at: echo(f"Serving the dashboard on {at.url}\n(Ctrl-C stops it)"),
            warn=lambda text: echo(text, err=True),
        )
        return
    from loop_orchestrator.dashboard.app import run_dashboard

    run_dashboard(path)
