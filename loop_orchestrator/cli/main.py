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
    audit,
    dashboard,
    demo,
    doctor,
    merge,
    plan,
    review,
    run,
    session,
    status,
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


# Each command lives in the module of cli/ named like the module of commands/ that holds its
# application function, and knows nothing of this group; they are added here (`lo-orch
# --help` lists them alphabetically).
for _command in (
    plan.plan_command,
    plan.approve_command,
    run.run_command,
    status.status_command,
    dashboard.dashboard_command,
    session.attach_command,
    run.retry_command,
    session.send_command,
    session.permit_command,
    session.signal_command,
    session.hook_command,
    audit.audit_command,
    merge.merge_command,
    merge.cleanup_command,
    review.comment_command,
    review.comments_command,
    review.request_changes_command,
    demo.demo_command,
    doctor.doctor_command,
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
