"""The process entry of ``lo-orch`` and ``python -m loop_orchestrator``, and the one module
for what sessions run: ``lo-orch hook EVENT`` (the plugin's ``hooks/lo-hook`` runs it on
every hook event of every session) and ``lo-orch signal PHASE``.

A session's call is answered here on the standard library alone (``sessions/hooks.py`` does
the work), before click and the commands are imported: they would double a hook's cost. Any
other call, and any call of those two this module does not parse (``--help``, ``--repo``,
``--dispute``, a usage error), goes to the click commands (``cli/main.py``) and their
messages.

``$LO_ORCH_HOOK`` (which ``hooks/lo-hook`` prefers) is ``python -I -S
.../sessions/fast_entry.py hook``: it answers a hook event here with no site-packages, no
``.pth`` file and no ``runpy``, a third of the CPU of ``python -m loop_orchestrator hook``
(``benchmarks/hooks.py``); any other call made that way is handed to ``python -m
loop_orchestrator`` (``by_path``).
"""

from __future__ import annotations

import os
import sys


def session_call(argv: list[str]) -> int | None:
    """The exit code of a session's call in ``argv`` (without the program name), answered
    without click; None for anything else."""
    if len(argv) == 2 and argv[0] == "hook" and not argv[1].startswith("-"):
        return hook(argv[1])
    if argv and argv[0] == "signal":
        return signal(argv[1:])
    return None


def hook(event: str) -> int:
    """``lo-orch hook EVENT``: read the event's JSON on stdin, answer, return the exit code
    (2: the Stop gate, its reason on stderr)."""
    from loop_orchestrator.sessions.hooks import run_hook

    stdin = sys.stdin
    if stdin is None or stdin.isatty():
        raw = ""
    else:  # bytes: the JSON is UTF-8 whatever the pane's locale says
        buffer = getattr(stdin, "buffer", None)
        raw = buffer.read().decode("utf-8", "replace") if buffer else stdin.read()
    outcome = run_hook(event, raw, os.environ)
    if outcome.stdout:
        sys.stdout.write(outcome.stdout)
        sys.stdout.flush()
    if outcome.stderr:
        sys.stderr.write(outcome.stderr)
        sys.stderr.flush()
    return outcome.exit_code


def signal(args: list[str]) -> int | None:
    """``lo-orch signal PHASE [--task T] [--note N]`` from a managed session.

    The common call (``$LO_ORCH_RUN_DIR`` set, no ``--repo``) reaches the supervisor in tens
    of milliseconds rather than after click, pydantic and git are imported. None: anything
    else, which the click command handles.
    """
    from loop_orchestrator.sessions.hooks import SIGNAL_PHASES

    run_dir = os.environ.get("LO_ORCH_RUN_DIR", "")
    if not args or args[0] not in SIGNAL_PHASES or not run_dir.startswith("/"):
        return None
    opts: dict[str, str] = {}
    rest = args[1:]
    while rest:
        key = rest[0]
        if key.startswith("--") and "=" in key:
            key, value = key.split("=", 1)
            rest = rest[1:]
        elif len(rest) >= 2:
            value, rest = rest[1], rest[2:]
        else:
            return None
        if key not in ("--task", "--note") or key in opts:
            return None
        opts[key] = value
    task = opts.get("--task") or os.environ.get("LO_ORCH_TASK", "")
    if not task:
        return None
    from loop_orchestrator.errors import StateError, UsageError
    from loop_orchestrator.sessions.hooks import signal_printed, signal_task

    try:
        result = signal_task(run_dir, args[0], task=task, note=opts.get("--note"))
    except (StateError, UsageError) as exc:
        sys.stderr.write(f"Error: {exc.render()}\n")
        return exc.exit_code
    sys.stdout.write(signal_printed(task, result))
    return 0


def main() -> None:
    """``lo-orch``: a session's call here, everything else through click."""
    code = session_call(sys.argv[1:])
    if code is None:
        from loop_orchestrator.cli.main import run_cli

        code = run_cli()
    sys.exit(code)


def by_path(argv: list[str]) -> None:
    """``sessions/fast_entry.py`` (``$LO_ORCH_HOOK``, under ``python -I -S``): a session's
    call answered on the package beside that file, anything else handed to the full
    command line of the same interpreter and package (site-packages and all)."""
    code = session_call(argv)
    if code is None:
        # the package beside this file, found after the interpreter's own path (no
        # PYTHONPATH: the commands' children, a project's tests among them, inherit it)
        root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
        run = (
            f"import runpy, sys; sys.path.append({root!r}); "
            "runpy.run_module('loop_orchestrator', run_name='__main__', alter_sys=True)"
        )
        os.execv(sys.executable, [sys.executable, "-c", run, *argv])
    sys.exit(code)
