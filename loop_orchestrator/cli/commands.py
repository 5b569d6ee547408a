"""Imports every command module so that each registers itself on the group."""

from __future__ import annotations

from loop_orchestrator.cli import (  # noqa: F401  imported for registration
    attach_cmds,
    audit_cmds,
    doctor_cmds,
    hook_cmds,
    permit_cmds,
    plan_cmds,
    run_cmds,
)
