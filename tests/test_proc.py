"""The subprocess gateway's decisions: the memory bound of a check's processes."""

from __future__ import annotations

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
