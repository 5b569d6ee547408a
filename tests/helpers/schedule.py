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


#: the modules that start Ray clusters of their own (the other Ray modules share ``ray_env``)
OWN_CLUSTER_MODULES = ("test_cluster_terminal", "test_cluster_doctor")


def check_groups_kept(dist: str, ids: list[str]) -> None:
    """Stop a run of `--dist loadgroup` whose worker collected a test of the Ray group without
    the group in its node id: xdist would spread the group over the workers, silently, and
    their Ray clusters, which take fixed ports, would start on both at once (pytest 9.2 broke
    the renaming xdist 3.8 relies on; so does a group marked after xdist's hook has run)."""
    if dist != "loadgroup":
        return
    spread = [
        i
        for i in ids
        if Path(i.split("::")[0]).stem in OWN_CLUSTER_MODULES and not i.endswith("@ray")
    ]
    if spread:
        pytest.exit(
            f"--dist loadgroup would not keep the Ray tests on one worker (e.g. {spread[0]} "
            f"has no @ray) with pytest {pytest.__version__}: install the versions "
            "pyproject.toml allows (.venv/bin/pip install -e '.[test,ray]')",
            returncode=pytest.ExitCode.USAGE_ERROR,
        )
