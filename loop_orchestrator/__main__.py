from __future__ import annotations

import sys

if __name__ == "__main__":
    argv = sys.argv[1:]
    if len(argv) == 2 and argv[0] == "hook" and not argv[1].startswith("-"):
        # `$LO_ORCH_BIN hook EVENT` runs on every prompt and stop of every managed session
        # (LO_ORCH_BIN is `python -m loop_orchestrator`): answer before importing click and
        # the commands, which would double the hook's cost (see hooks.py).
        from loop_orchestrator.sessions.hooks import hook_main

        sys.exit(hook_main(argv[1]))
    if argv and argv[0] == "signal":
        # a session's report to the supervisor: the same reasoning (hooks.signal_main)
        from loop_orchestrator.sessions.hooks import signal_main

        code = signal_main(argv[1:])
        if code is not None:
            sys.exit(code)

    from loop_orchestrator.cli.main import main

    main()
