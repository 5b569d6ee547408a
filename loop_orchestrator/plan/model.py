"""The plan file (contract, docs/design.md section 4): its model and hash.

Reading and validating one is ``loading``'s (the semantic checks are ``validation``'s);
scheduling (waves, the ready queue) is in ``schedule``, owned-path patterns in ``globs``.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DoneCheck(_Model):
    criterion: str
    check: str | None = None

    def argv(self) -> list[str]:
        """The check as an argument list (run without a shell)."""
        return shlex.split(self.check or "")


_LABEL_KEY_RE = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._/-]{0,61}[A-Za-z0-9])?$")
_LABEL_VALUE_RE = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")


class Task(_Model):
    id: str
    title: str = ""
    objective: str
    owns: list[str]
    produces: list[str] = Field(default_factory=list)
    consumes: list[str] = Field(default_factory=list)
    depends_on: list[str] = Field(default_factory=list)
    done: list[DoneCheck]
    complexity: Literal["simple", "medium", "complex"] = "medium"
    #: optional budget in dollars for this task's session (wins over [run]
    #: task_max_cost_usd); over it, the task is blocked at its next turn boundary
    max_cost_usd: float | None = Field(default=None, gt=0, allow_inf_nan=False)
    #: optional: the Ray node labels this task's session needs (``[cluster] backend = "ray"``),
    #: e.g. ``{"lo-node": "gpu"}`` for a node started with ``ray start --labels``
    node_labels: dict[str, str] = Field(default_factory=dict)

    @field_validator("node_labels")
    @classmethod
    def _labels(cls, value: dict[str, str]) -> dict[str, str]:
        for key, val in value.items():
            if not _LABEL_KEY_RE.match(key) or not _LABEL_VALUE_RE.match(val):
                msg = (
                    f"node label {key!r}: {val!r} is not a Ray node label: keys are letters,"
                    " digits, '-', '_', '.', '/' (at most 63), values the same without '/'"
                )
                raise ValueError(msg)
        return value

    @property
    def label(self) -> str:
        return self.title or self.id


class DoneTask(_Model):
    id: str
    title: str = ""
    produces: list[str] = Field(default_factory=list)
    signatures: dict[str, str] = Field(default_factory=dict)


class Plan(_Model):
    goal: str
    name: str | None = None
    base: str | None = None
    concurrency: int | None = Field(default=None, ge=1, le=64)
    verify: str | None = None
    tasks: list[Task]
    done_tasks: list[DoneTask] = Field(default_factory=list)

    def task(self, task_id: str) -> Task:
        for t in self.tasks:
            if t.id == task_id:
                return t
        raise KeyError(task_id)

    @property
    def run_name(self) -> str:
        return self.name or slugify(self.goal)

    def sha256(self) -> str:
        return plan_hash(self)


def slugify(text: str, limit: int = 40) -> str:
    """A run name from free text: lower case, [a-z0-9-], at most ``limit`` characters."""
    slug = re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")
    slug = slug[:limit].rstrip("-")
    return slug or "run"


def plan_hash(plan: Plan) -> str:
    """sha256 of the canonical JSON of the plan: what Gate 1 approves.

    A field added later counts only when set, so a plan approved before it existed keeps its
    hash (a run approved by an older lo-orch is not refused as "changed since approval").
    """
    data = plan.model_dump(mode="json")
    for task in data["tasks"]:
        if not task.get("node_labels"):
            task.pop("node_labels", None)
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()
