"""Issue -> plan draft: the parent gives the goal, each open child a task, done children
become ``done_tasks`` carrying the exact signatures of what they built.

Partial resume (seed 002): a child that is closed/done in the tracker, or named with
``--done KEY``, gets no task and no session, but its outputs stay in the dependency graph
as base outputs, so dependents receive their signatures. The signatures are read from the
base commit: names in backticks in the child's text (``get_db``, ``getBuildingArea(pnu:
string)``) looked up in the files the text mentions, else anywhere in the tree's .py/.ts/.js
files; a mentioned file with no names gives all of its top-level signatures.

A skipped child (closed as not planned / duplicate / won't do / canceled) is neither: no
task, no done task. The planning prompt and the Gate 1 summary list it with its reason and
say its code is not on the base branch; ``--done KEY`` overrides that for one child.
"""

from __future__ import annotations

import logging
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from loop_orchestrator import templating
from loop_orchestrator.config import Settings
from loop_orchestrator.errors import IntakeError
from loop_orchestrator.intake import goal as goalmod
from loop_orchestrator.intake.basetree import BaseTree
from loop_orchestrator.intake.fetch import fetch_tree
from loop_orchestrator.intake.trackers import Issue, IssueTree, task_id_for
from loop_orchestrator.plan import signatures
from loop_orchestrator.plan.model import DoneTask

log = logging.getLogger(__name__)

#: characters of an issue body put in the prompt (the rest is cut, with a note)
MAX_BODY = 8000
#: top-level signatures taken from one mentioned file when the text names none
MAX_FILE_SIGNATURES = 30

_INLINE_CODE = re.compile(r"(?<!`)`([^`\n]+)`(?!`)")
_DECL = re.compile(
    r"^(?:export\s+)?(?:default\s+)?(?:declare\s+)?(?:async\s+)?"
    r"(?:def|class|function|interface|type|const|let|enum)\s+([A-Za-z_$][\w$]*)"
)
_CALLISH = re.compile(r"^([A-Za-z_$][\w$]*(?:\.[A-Za-z_$][\w$]*)*)\s*(?:[(<:]|\Z)")
_PATH_TOKEN = re.compile(r"[\w./@+-]+\.(?:py|pyi|ts|tsx|mts|cts|js|jsx|mjs|cjs)\b")


def backtick_names(text: str) -> tuple[list[str], list[str]]:
    """Identifiers named in inline code, and the subset written as code (a call or a
    declaration: `get_db()`, `def get_db() -> X`), which must exist when named.

    `User.save()` names the class ``User`` (its members come with it); `app.db.get_db`
    names ``get_db``.
    """
    names: list[str] = []
    strong: list[str] = []
    for m in _INLINE_CODE.finditer(text):
        span = m.group(1).strip()
        if "/" in span or _PATH_TOKEN.fullmatch(span):
            continue
        decl = _DECL.match(span)
        if decl:
            names.append(decl.group(1))
            strong.append(decl.group(1))
            continue
        call = _CALLISH.match(span)
        if call:
            parts = call.group(1).split(".")
            name = parts[0] if len(parts) > 1 and parts[0][:1].isupper() else parts[-1]
            names.append(name)
            if len(span) > len(call.group(1)):  # `name(...)`, `name<T>`, `name: type`
                strong.append(name)
    keep = [n for n in dict.fromkeys(names) if n not in _NOT_NAMES]
    return keep, [n for n in dict.fromkeys(strong) if n in keep]


# words that are inline code in issue texts but never an output's name
_NOT_NAMES = frozenset(
    {
        "None",
        "True",
        "False",
        "null",
        "undefined",
        "true",
        "false",
        "self",
        "this",
        "str",
        "int",
        "float",
        "bool",
        "dict",
        "list",
        "string",
        "number",
        "boolean",
        "void",
        "any",
    }
)


def mentioned_paths(text: str, tree_paths: frozenset[str]) -> list[str]:
    """Files of the tree the text mentions (a path, or a URL ending in one)."""
    found: list[str] = []
    for m in _PATH_TOKEN.finditer(text):
        token = m.group(0).lstrip("./")
        parts = token.split("/")
        for i in range(len(parts)):
            candidate = "/".join(parts[i:])
            if candidate in tree_paths:
                found.append(candidate)
                break
    return list(dict.fromkeys(found))


def _format(sig: signatures.Signature) -> str:
    """The signature text with its file, as in the plan format (``...   # app/db.py``)."""
    mark = signatures.comment_prefix(sig.source)
    if "\n" in sig.text:
        return f"{mark} {sig.source}\n{sig.text}"
    return f"{sig.text}   {mark} {sig.source}"


def done_signatures(issue: Issue, tree: BaseTree) -> tuple[dict[str, str], list[str]]:
    """name -> signature text for a done child, and the names that were not found."""
    text = f"{issue.title}\n{issue.body}"
    names, strong = backtick_names(text)
    files = mentioned_paths(text, tree.paths)
    found: dict[str, signatures.Signature] = {}
    if names:
        in_files = signatures.find(names, tree.sources(files)) if files else []
        found.update((s.name, s) for s in in_files)
        rest = [n for n in names if n not in found]
        if rest:
            sources = tree.sources(tree.files_naming(rest))
            found.update((s.name, s) for s in signatures.find(rest, sources))
    else:
        for path in files:
            source = tree.read(path) or ""
            sigs = signatures.signatures_in(path, source)
            public = {n: s for n, s in sigs.items() if not n.startswith("_")}
            for name, sig in list(public.items())[:MAX_FILE_SIGNATURES]:
                found.setdefault(name, sig)
    missing = [n for n in strong if n not in found]
    return {n: _format(s) for n, s in found.items()}, missing


def _cut(text: str, limit: int = MAX_BODY) -> str:
    text = text.strip()
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n[... {len(text) - limit} more characters cut by lo-orch]"


def _unique_ids(children: Sequence[Issue]) -> dict[str, str]:
    """child key -> task id, unique (a clash gets -2, -3...)."""
    ids: dict[str, str] = {}
    used: set[str] = set()
    for c in children:
        base = task_id_for(c.key)
        tid, n = base, 2
        while tid in used or tid == "staging":
            suffix = f"-{n}"
            tid = base[: 40 - len(suffix)] + suffix
            n += 1
        used.add(tid)
        ids[c.key] = tid
    return ids


def _same_key(a: str, b: str) -> bool:
    return a.strip().upper() == b.strip().upper()


def mark_done(tree: IssueTree, done_keys: Sequence[str]) -> IssueTree:
    """The tree with the children named in ``done_keys`` marked done (seed: "name its key")."""
    if not done_keys:
        return tree
    unknown = [k for k in done_keys if not any(_same_key(k, c.key) for c in tree.children)]
    if unknown:
        known = ", ".join(c.key for c in tree.children) or "none"
        msg = f"--done {', '.join(unknown)}: not a child of {tree.parent.key} (children: {known})"
        raise IntakeError(
            msg,
            hint="Name the child issues exactly as the tracker shows them.",
        )
    children = [
        Issue(c.key, c.title, c.body, True, c.url, "named done")
        if any(_same_key(k, c.key) for k in done_keys)
        else c
        for c in tree.children
    ]
    return IssueTree(tree.tracker, tree.parent, children)


def draft_from_issue(
    repo: Path,
    key: str,
    settings: Settings,
    *,
    done_keys: Sequence[str] = (),
    env: Mapping[str, str] | None = None,
) -> goalmod.Draft:
    """`lo-orch plan --issue KEY`: read the tree, build done tasks, ask for the rest."""
    env = os.environ if env is None else env
    base_sha = goalmod.ensure_can_plan(repo)
    tree = mark_done(fetch_tree(key, repo, env=env, intake=settings.intake), done_keys)
    parent = tree.parent
    if not tree.children:
        msg = f"{parent.key} ({parent.title!r}) has no child issues: there is nothing to split"
        raise IntakeError(
            msg,
            hint="Add sub-issues (one per piece of work) to it, or plan it as a goal: "
            f'`lo-orch plan --goal "{parent.title}"`.',
        )
    open_children = tree.open_children
    skipped = tree.skipped_children
    if not open_children:
        if skipped:
            msg = (
                f"no child of {parent.key} is open: {len(tree.done_children)} done, "
                f"{len(skipped)} skipped ({skipped_list(skipped)}): nothing left to plan"
            )
        else:
            msg = (
                f"every child of {parent.key} is already done ({len(tree.children)}): "
                "nothing left to plan"
            )
        raise IntakeError(
            msg,
            hint="Reopen a child issue, or plan new work with `lo-orch plan --goal`.",
        )
    ids = _unique_ids(tree.children)
    base = BaseTree(repo, base_sha)
    notes: list[str] = []
    done_tasks: list[DoneTask] = []
    for child in tree.done_children:
        sigs, missing = done_signatures(child, base)
        done_tasks.append(
            DoneTask(id=ids[child.key], title=child.title, produces=list(sigs), signatures=sigs)
        )
        if missing:
            notes.append(
                f"{child.key} is done, but {', '.join(missing)} was not found in the "
                f"base commit {base_sha[:12]}; add its signature to `done_tasks` in the "
                "draft if a task needs it."
            )
        elif not sigs:
            notes.append(
                f"{child.key} is done and names no outputs (no `names` in backticks, no "
                "files): dependents get no signatures from it."
            )

    issue_ctx: dict[str, Any] = {
        "tracker": {"github": "GitHub", "jira": "Jira", "linear": "Linear"}.get(
            tree.tracker, "tracker"
        ),
        "parent": {
            "key": parent.key,
            "title": parent.title,
            "body": _cut(parent.body, 4 * MAX_BODY),
        },
        "children": [
            {"key": c.key, "id": ids[c.key], "title": c.title, "body": _cut(c.body)}
            for c in open_children
        ],
        "done": [
            {"id": d.id, "key": c.key, "title": c.title, "signatures": d.signatures}
            for d, c in zip(done_tasks, tree.done_children, strict=True)
        ],
        "skipped": [{"key": c.key, "title": c.title, "reason": c.skipped} for c in skipped],
    }
    prompt = templating.render(
        "plan_prompt.md.j2",
        goal=parent.title,
        issue=issue_ctx,
        verify=goalmod.verify_hint(repo, settings),
        concurrency=settings.run.concurrency,
    )
    expected = {ids[c.key]: c.key for c in open_children}
    done_dump = [d.model_dump(mode="json") for d in done_tasks]

    def fixup(data: Any) -> tuple[Any, list[str]]:
        if not isinstance(data, dict):
            return data, []
        data = dict(data)
        data["done_tasks"] = done_dump  # the tracker's and the tree's word, not the model's
        if not str(data.get("goal") or "").strip():
            data["goal"] = parent.title
        tasks = data.get("tasks") if isinstance(data.get("tasks"), list) else []
        got = [t.get("id") for t in tasks if isinstance(t, dict)]
        problems = [
            f"tasks: no task for the open child issue {child_key}; add one with id {tid!r}"
            for tid, child_key in expected.items()
            if tid not in got
        ]
        problems += [
            f"task {tid!r}: matches no open child issue; make exactly one task per open child, "
            f"with the ids {', '.join(expected)}"
            for tid in got
            if isinstance(tid, str) and tid not in expected
        ]
        return data, problems

    skip_line = skipped_note(skipped, tree.tracker) if skipped else ""
    if skip_line:
        notes.insert(0, skip_line)
    draft = goalmod.draft_plan(
        repo,
        settings,
        prompt,
        fixup=fixup,
        origin=f"lo-orch plan --issue {key}",
        header=[skip_line] if skip_line else [],
    )
    head = (
        f"Issue {parent.key} ({issue_ctx['tracker']}): {len(open_children)} open child"
        f"{'ren' if len(open_children) != 1 else ''} -> tasks"
    )
    if done_tasks:
        head += f"; done: {', '.join(c.key for c in tree.done_children)} -> done_tasks"
    if skipped:
        head += f"; skipped: {', '.join(c.key for c in skipped)}"
    draft.notes = [head, *notes, *draft.notes]
    return draft


def skipped_list(children: Sequence[Issue]) -> str:
    """``KEY (reason), KEY (reason)``."""
    return ", ".join(f"{c.key} ({c.skipped})" for c in children)


def skipped_note(children: Sequence[Issue], tracker: str = "") -> str:
    """The Gate 1 line for skipped children: what they are, and the way out."""
    jira = (
        " (or list its resolution in [intake.jira] done_resolutions)" if tracker == "jira" else ""
    )
    return (
        f"Skipped (no session, not done: their code is NOT on the base branch): "
        f"{skipped_list(children)}. If one's work is on the base branch after all, "
        f"plan again with `--done KEY`{jira}; if it should be done now, reopen it."
    )
