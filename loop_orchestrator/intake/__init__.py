"""Intake: a plan drafted from a goal (headless Claude Code) or from an issue tree.

- ``goal``: the planning loop (ask, validate, one retry, save ``plan.draft.yaml``);
- ``agent``: Claude Code headless (``-p --output-format json --json-schema``), read-only;
- ``issue``: parent -> goal, open children -> tasks, done children -> ``done_tasks`` with
  signatures from the base commit;
- ``trackers`` (keys, dispatch, the ``intake`` tool role), ``github``, ``jira``, ``linear``;
- ``http``: the urllib JSON client whose failures are clear errors.

``commands.plan.plan_from_goal`` / ``plan_from_issue`` record the draft as the run's plan.
"""

from __future__ import annotations
