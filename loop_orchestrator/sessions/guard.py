"""Gates are a person's act: refuse them from inside a managed agent session.

``approve`` (Gate 1), ``merge`` (Gate 2, with or without ``--yes``), ``retry`` and
``cleanup --abandon`` call ``refuse_in_session`` at the start of their core function, so the
CLI, the demo and any other caller pass the same check.

How a session is recognised: lo-orch starts every agent pane with ``LO_ORCH_TASK`` in its
environment (docs/design.md section 6). The agent can unset it in its own shell
(``env -u LO_ORCH_TASK lo-orch merge --yes``), but not the start environment of its
ancestors, which the kernel keeps in ``/proc/<pid>/environ`` (``procinfo.managed_ancestor``).

Limits, honestly: a process that leaves its ancestry (``setsid`` plus a double fork, so it is
reparented to init, then ``env -i``) has no managed ancestor left to find. Outside the OS
sandbox that escape works; inside it (sandbox.py) the sandbox runs in its own PID namespace,
so such an orphan is reparented to the sandbox's init, which was started with
``LO_ORCH_TASK``, and it cannot write ``.orchestration/`` or the refs a gate would change
anyway. Without ``/proc`` (not Linux) only the environment variable is checked.
"""

from __future__ import annotations

import os

from loop_orchestrator.errors import GateError
from loop_orchestrator.sessions import procinfo


class SessionGateError(GateError):
    """A gate was asked for from inside a managed agent session."""


def refuse_in_session(command: str) -> None:
    """Raise ``SessionGateError`` when this process runs inside a managed agent session.

    ``command`` names the gate for the message (``lo-orch approve``).
    """
    found = procinfo.managed_ancestor()
    task = found[1] if found else os.environ.get("LO_ORCH_TASK")
    if not task:
        return
    how = (
        f"process {found[0]} in its parent chain was started by lo-orch for task {task!r}"
        if found
        else f"LO_ORCH_TASK={task} is set"
    )
    msg = (
        f"`{command}` is a person's decision and cannot run inside a managed agent session ({how})"
    )
    raise SessionGateError(
        msg,
        hint=f"A person runs `{command}` from their own terminal, outside the agent's pane. "
        'A session that needs it should `lo-orch signal blocked --note "..."` and wait.',
    )
