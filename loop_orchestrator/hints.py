"""How a message names the lo-orch command that works where the user is.

Every hint says `lo-orch ...`; when lo-orch was started through `scripts/lo-orch` and no
``lo-orch`` is on PATH, the person must type that script's path instead.
The CLI and the dashboard both show messages through ``for_user``.
"""

from __future__ import annotations

import os
import shlex
import shutil

#: what `scripts/lo-orch` sets to the path it was called by (``$0``)
PROG_ENV = "LO_ORCH_PROG"


def prog() -> str:
    """The command that runs this lo-orch from where the user is:
    ``lo-orch`` when that is on PATH (or lo-orch was not started by `scripts/lo-orch`),
    else the path `scripts/lo-orch` was called by."""
    typed = os.environ.get(PROG_ENV, "").strip()
    if not typed or shutil.which("lo-orch"):
        return "lo-orch"
    return shlex.quote(typed)


def for_user(text: str) -> str:
    """``text`` with every `lo-orch ...` hint spelled as the command that works here."""
    name = prog()
    if name == "lo-orch":
        return text
    return text.replace("`lo-orch ", f"`{name} ").replace("`lo-orch`", f"`{name}`")
