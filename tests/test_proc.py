"""The subprocess gateway's decisions: the memory bound of a check's processes."""

from __future__ import annotations

import os
import sys

from loop_orchestrator import proc
from loop_orchestrator.proc import CHECK_MEMORY_FLOOR_MB, check_memory_bound

GIB = 2**30


def test_the_check_memory_bound_is_a_quarter_of_the_machine_with_a_floor() -> None:
    assert check_memory_bound(None, 64 * GIB) == 16 * GIB
    assert check_memory_bound(None, 4 * GIB) == CHECK_MEMORY_FLOOR_MB * 2**20
    assert check_memory_bound(None, None) is None  # the machine's memory is not known


def test_a_configured_bound_wins_and_zero_means_none() -> None:
    assert check_memory_bound(512, 64 * GIB) == 512 * 2**20
    assert check_memory_bound(512, None) == 512 * 2**20
    assert check_memory_bound(0, 64 * GIB) is None


def test_a_bounded_call_runs_in_its_own_session_a_terminal_one_keeps_ours() -> None:
    """A command with a timeout gets a session (and process group) of its own, so its whole
    group can be killed; a call that may ask the person (git with a remote: ssh reads the
    passphrase from the terminal) keeps the caller's session, as one without a timeout."""
    ask = [sys.executable, "-c", "import os; print(os.getsid(0))"]
    own = int(proc.run(ask, timeout=30).stdout)
    assert own != os.getsid(0)
    assert int(proc.run(ask, timeout=30, terminal=True).stdout) == os.getsid(0)
    assert int(proc.run(ask).stdout) == os.getsid(0)
