"""Jinja rendering of everything lo-orch writes for people and agents to read, and the
assembly of a task's brief."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jinja2

from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.resources import templates_dir

if TYPE_CHECKING:
    from loop_orchestrator.plan.model import Plan, Task
    from loop_orchestrator.plan.signatures import Signature
    from loop_orchestrator.runstate.state import RunDir


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(templates_dir())),
        undefined=jinja2.StrictUndefined,
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
    )


def render(template: str, **context: Any) -> str:
    """Render ``templates/<template>`` with ``context`` (undefined names are errors)."""
    return environment().get_template(template).render(**context)


def task_brief(
    plan: Plan,
    task: Task,
    *,
    run: str,
    repo: Path,
    rundir: RunDir,
    base_sha: str,
    staging_sha: str,
    branch: str,
    waves: Mapping[str, int],
    deps: Mapping[str, Sequence[str]],
    tools: Mapping[str, Any],
) -> str:
    """A task's brief (templates/brief.md.j2): the goal, its role among the others, the
    exact signatures it consumes, its scope, the definition of done, the output contract."""
    by_id = {t.id: t for t in plan.tasks}
    return render(
        "brief.md.j2",
        task=task,
        run=run,
        goal=plan.goal,
        total_tasks=len(plan.tasks),
        wave=waves[task.id],
        worktree=str(rundir.worktree_path(run, task.id)),
        branch=branch,
        dependencies=[by_id[d] for d in deps[task.id]],
        dependents=[t for t in plan.tasks if task.id in deps[t.id]],
        signatures=consumed_signatures(repo, plan, task, base_sha, staging_sha),
        others_owns=[t for t in plan.tasks if t.id != task.id],
        tools=tools,
        plan_path=str(rundir.agent_plan_path(task.id)),
    )


def consumed_signatures(
    repo: Path, plan: Plan, task: Task, base_sha: str, staging_sha: str
) -> list[Signature]:
    """Exact signatures of what ``task`` consumes: given by done tasks, else read from the
    code (producers' files on staging; the base tree for done tasks without signatures)."""
    # deferred: signatures (its parsers) would make importing templating five times
    # dearer (measured 0.09 s -> 0.44 s), and most commands import templating
    from loop_orchestrator.plan import signatures
    from loop_orchestrator.plan.globs import path_matches

    found: list[Signature] = []
    producers = {out: t for t in plan.tasks for out in t.produces}
    wanted: list[str] = []
    for name in task.consumes:
        done = next((d for d in plan.done_tasks if name in d.produces), None)
        if done is not None and name in done.signatures:
            found.append(signatures.Signature(name, f"done task {done.id}", done.signatures[name]))
        else:
            wanted.append(name)
    if not wanted:
        return found
    # Only files that mention a wanted name are read (git grep).
    owners = [producers[n] for n in wanted if n in producers]
    files: dict[str, str] = {}
    for path in gitutil.grep_files(repo, staging_sha, wanted):
        if owners and not any(path_matches(path, p.owns) for p in owners):
            continue
        text = gitutil.file_at(repo, staging_sha, path)
        if text is not None:
            files[path] = text
    if any(n not in producers for n in wanted):
        for path in gitutil.grep_files(repo, base_sha, wanted):
            if path not in files:
                text = gitutil.file_at(repo, base_sha, path)
                if text is not None:
                    files[path] = text
    found += signatures.find(wanted, files)
    return found
