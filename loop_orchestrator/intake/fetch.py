"""An issue tree from the tracker a key names (GitHub, Jira, Linear) or the configured
intake command: ``fetch_tree``. What the trackers share is in ``trackers.py``."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loop_orchestrator.config import IntakeConfig, load_tool_profile
from loop_orchestrator.intake import github, jira, linear
from loop_orchestrator.intake.trackers import (
    IssueTree,
    fetch_with_command,
    intake_command,
    parse_key,
)

log = logging.getLogger(__name__)


def fetch_tree(
    key: str,
    repo: Path,
    *,
    env: Mapping[str, str] | None = None,
    profile: Mapping[str, Mapping[str, Any]] | None = None,
    intake: IntakeConfig | None = None,
) -> IssueTree:
    """The parent issue and its children, from the tracker the key (or profile) names;
    ``intake`` is the ``[intake]`` settings (GitHub Enterprise hosts, Jira deployment)."""
    env = os.environ if env is None else env
    if profile is None:
        profile = load_tool_profile(repo, env=env)
    command = intake_command(profile)
    if command is not None:
        log.info("issue read with the intake command", extra={"command": command})
        return fetch_with_command(command, key, repo)
    intake = IntakeConfig() if intake is None else intake
    ref = parse_key(key, env, intake)
    if ref.tracker == "github":
        return github.fetch(ref, env)
    if ref.tracker == "jira":
        return jira.fetch(ref, env, intake.jira)
    return linear.fetch(ref, env)
