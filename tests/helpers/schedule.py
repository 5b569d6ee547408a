"""The order the suite's tests are handed to its workers in."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest


def longest_first(items: list[pytest.Item]) -> None:
    """Order the modules for `--dist loadgroup`, which hands work out in collection order:
    the Ray group first (one unit, the longest), then the modules with the most slow tests,
    the fast ones last, so the end of a run is milliseconds-long tests filling the gap a
    long test left on the other worker instead of a long test started last. Each module
    stays in one piece and in its own order (its module fixtures are built once)."""
    slow: Counter[Path] = Counter()
    ray: set[Path] = set()
    first: dict[Path, int] = {}
    for i, item in enumerate(items):
        first.setdefault(item.path, i)
        if item.get_closest_marker("slow"):
            slow[item.path] += 1
        group = item.get_closest_marker("xdist_group")
        if group is not None and group.args == ("ray",):
            ray.add(item.path)
    # (the Ray modules keep their order among themselves: their clusters come one at a time)
    items.sort(
        key=lambda it: (it.path not in ray, 0 if it.path in ray else -slow[it.path], first[it.path])
    )
