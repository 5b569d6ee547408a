"""The ``lo-orch`` command group and the one place mapping errors to exits (``run_cli``; the
process entry, with what sessions run answered before click, is ``entry.py``).

Exit codes (contract): 0 ok, 1 user-facing error (``Error: ...`` on stderr), 2 usage error,
3 unexpected error (log file path printed), 130 interrupted.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import traceback
from datetime import UTC, datetime
from pathlib import Path

import click

from loop_orchestrator import __version__
from loop_orchestrator.cli import (
    attach_cmds,
    audit_cmds,
    dashboard_cmds,
    doctor_cmds,
    hook_cmds,
    permit_cmds,
    plan_cmds,
    run_cmds,
)
from loop_orchestrator.errors import LoOrchError

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_UNEXPECTED = 3
EXIT_INTERRUPTED = 130


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="lo-orch")
@click.option("-v", "--verbose", count=True, help="More log output on stderr (-vv for debug).")
def cli(verbose: int) -> None:
    """Run many AI coding sessions in parallel and bring their work back safely.

    \b
    Typical flow:
      lo-orch plan plan.yaml     validate, schedule, show the Gate 1 summary
      lo-orch approve            Gate 1: approve the split
      lo-orch run                supervise until Gate 2
      lo-orch merge              Gate 2: review the whole diff, move the feature branch
    """
    level = {0: logging.WARNING, 1: logging.INFO}.get(verbose, logging.DEBUG)
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("%(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger("loop_orchestrator")
    root.handlers[:] = [handler]
    root.setLevel(level)


# Each command lives in a module of cli/ that knows nothing of this group; they are added
# here (`lo-orch --help` lists them alphabetically).
for _command in (
    plan_cmds.plan_command,
    plan_cmds.approve_command,
    run_cmds.run_command,
    plan_cmds.status_command,
    dashboard_cmds.dashboard_command,
    attach_cmds.attach_command,
    run_cmds.retry_command,
    dashboard_cmds.send_command,
    permit_cmds.permit_command,
    hook_cmds.signal_command,
    hook_cmds.hook_command,
    audit_cmds.audit_command,
    run_cmds.merge_command,
    run_cmds.cleanup_command,
    run_cmds.demo_command,
    doctor_cmds.doctor_command,
):
    cli.add_command(_command)


def _crash_log(exc: BaseException) -> Path:
    folder = Path(os.environ.get("LO_ORCH_LOG_DIR") or tempfile.gettempdir())
    folder.mkdir(parents=True, exist_ok=True)
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    path = folder / f"lo-orch-crash-{stamp}-{os.getpid()}.log"
    path.write_text(
        f"lo-orch {__version__}\nargv: {sys.argv}\n\n" + "".join(traceback.format_exception(exc)),
        encoding="utf-8",
    )
    return path


def run_cli(args: list[str] | None = None) -> int:
    """Run the CLI and return its exit code; never lets a traceback reach the user."""
    try:
        # Without standalone mode click *returns* the code of a `ctx.exit(n)` / `Exit(n)`
        # (e.g. `lo-orch hook Stop` blocking with 2) instead of raising it: keep it.
        code = cli.main(args=args, prog_name="lo-orch", standalone_mode=False)
    except click.exceptions.Abort:
        click.echo("Interrupted.", err=True)
        return EXIT_INTERRUPTED
    except KeyboardInterrupt:
        click.echo("Interrupted.", err=True)
        return EXIT_INTERRUPTED
    except click.exceptions.Exit as exc:
        return int(exc.exit_code)
    except click.ClickException as exc:
        exc.show()
        return EXIT_USAGE if isinstance(exc, click.UsageError) else exc.exit_code
    except LoOrchError as exc:
        from loop_orchestrator.hints import for_user

        click.echo(for_user(f"Error: {exc.render()}"), err=True)
        return exc.exit_code
    except BrokenPipeError:
        return EXIT_OK
    except Exception as exc:
        path = _crash_log(exc)
        click.echo(
            f"Error: unexpected {type(exc).__name__}: {exc}\n"
            f"A full report was written to {path}; please include it in a bug report.",
            err=True,
        )
        return EXIT_UNEXPECTED
    if isinstance(code, int) and not isinstance(code, bool):
        return code
    return EXIT_OK
