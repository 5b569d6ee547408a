"""`lo-orch demo`: the whole flow on a throwaway repository."""

from __future__ import annotations

from collections.abc import Callable

from loop_orchestrator.simulator import demo_flow as demo_mod
from loop_orchestrator.simulator.demo_flow import DemoResult


def demo(
    *, keep: bool = False, agent: str = "scripted", progress: Callable[[str], None] | None = None
) -> DemoResult:
    """`lo-orch demo [--keep] [--agent scripted|claude]`: plan, approve, run and merge a
    small run; the report's lines."""

    return demo_mod.run_demo(keep=keep, progress=progress, agent=agent)
