"""Scope: a task's commit touches only what the task owns, and never how work is checked.

Input is the raw change list (``git diff --no-renames --raw base commit``): a rename is a
deletion plus an addition, so both sides must be owned; mode and type changes (symlinks,
submodules) are seen too.

Rules (docs/design.md section 7.1):
- ``.orchestration/``, ``.worktrees/``, ``.git/``: always out of scope.
- Interpreter start-up code (``*.pth``, ``sitecustomize``, ``usercustomize``) and virtual
  environments (``.venv/``, ``venv/``, ``pyvenv.cfg``): always out of scope, whatever
  ``owns`` says; they decide what runs inside every check before any test.
- CI files and test configuration (conftest.py, pytest.ini, tox.ini, jest/vitest config...):
  out of scope even when a glob in ``owns`` covers them. Only an exact, literal path in
  ``owns`` (no wildcard), which a human approved at Gate 1, allows one; the change is then
  still reported as a warning so the reviewer sees it.
- Test settings embedded in shared files (``[tool.pytest]``/coverage in pyproject.toml,
  pytest sections of setup.cfg, jest keys and test scripts in package.json): always out of
  scope, even when the file is owned (owning pyproject.toml to add a dependency does not
  allow changing how tests run).
- Lock files and git metadata (.gitattributes can hide lines from diffs): out of scope
  unless owned, like any other file, with a message saying why.
- Symlinks pointing outside the repository and submodules not owned: out of scope.
"""

from __future__ import annotations

import posixpath
import re
from collections.abc import Callable, Mapping, Sequence
from typing import Protocol

from loop_orchestrator.verify import classify
from loop_orchestrator.verify.models import CheckId, Finding, blocking, warning

SYMLINK_MODE = "120000"
GITLINK_MODE = "160000"
_WILDCARD = re.compile(r"[*?\[]")

#: (path, patterns) -> owned?  ``globs.path_matches`` in production
Matcher = Callable[[str, Sequence[str]], bool]
#: path -> (text at base, text at commit); None for a side where the file is absent
Contents = Callable[[str], tuple[str | None, str | None]]


class ChangeLike(Protocol):
    @property
    def status(self) -> str: ...
    @property
    def path(self) -> str: ...
    @property
    def old_mode(self) -> str: ...
    @property
    def new_mode(self) -> str: ...


_VERB = {"A": "adds", "M": "changes", "D": "deletes", "T": "changes the file type of"}


def literally_owned(path: str, owns: Sequence[str]) -> bool:
    """Whether ``owns`` names ``path`` exactly, without any wildcard."""
    norm = path.removeprefix("./")
    return any(not _WILDCARD.search(p) and p.removeprefix("./").rstrip("/") == norm for p in owns)


def check_scope(
    changes: Sequence[ChangeLike],
    owns: Sequence[str],
    *,
    matches: Matcher,
    contents: Contents | None = None,
    other_owners: Mapping[str, Sequence[str]] | None = None,
) -> list[Finding]:
    """Findings for every change outside the task's scope.

    ``other_owners`` (task id -> owns) only improves messages ("owned by task X").
    """
    findings: list[Finding] = []
    for ch in changes:
        findings += _check_one(ch, owns, matches, contents, other_owners or {})
    return findings


def _owner_hint(path: str, matches: Matcher, others: Mapping[str, Sequence[str]]) -> str:
    owners = [tid for tid, pats in others.items() if matches(path, pats)]
    if owners:
        return f" It belongs to task {', '.join(repr(o) for o in owners)}."
    return ""


def _check_one(
    ch: ChangeLike,
    owns: Sequence[str],
    matches: Matcher,
    contents: Contents | None,
    others: Mapping[str, Sequence[str]],
) -> list[Finding]:
    path, verb = ch.path, _VERB.get(ch.status, "changes")
    fix: str
    revert = f"Revert your change to {path}."
    if classify.is_orchestration(path):
        return [
            blocking(
                f"{verb} {path}, which belongs to lo-orch itself (.orchestration/, .worktrees/, "
                ".git/); a task never touches it.",
                "scope.orchestration",
                path,
                fix=revert,
            )
        ]
    if classify.is_interpreter_hook(path):
        return [
            blocking(
                f"{verb} {path}, code the Python interpreter runs at start-up (a .pth file, "
                "sitecustomize or usercustomize). It would run inside every check before any "
                "test, so no task may add or change one, whatever its owns say.",
                "scope.interpreter-hook",
                path,
                fix=revert + " Put the code in a normal module that your code imports.",
            )
        ]
    if classify.is_environment_path(path):
        return [
            blocking(
                f"{verb} {path}, part of a Python virtual environment. Checks run with the "
                "user's own environment; a committed one would replace it (its python could be "
                "any program), so no task may add or change one, whatever its owns say.",
                "scope.interpreter-hook",
                path,
                fix=revert + " Keep virtual environments out of the repository (.gitignore).",
            )
        ]
    config: tuple[tuple[CheckId, Callable[[str], bool], str], ...] = (
        ("scope.ci", classify.is_ci, "a CI file"),
        ("scope.test-config", classify.is_test_config_path, "test configuration"),
    )
    for kind, test, what in config:
        if not test(path):
            continue
        if literally_owned(path, owns):
            return [
                warning(
                    f"{verb} {what} ({path}); allowed because the approved plan names this "
                    "exact path in the task's owns. Review it by hand.",
                    kind,
                    path,
                )
            ]
        return [
            blocking(
                f"{verb} {what} ({path}). CI and test configuration decide how work is checked, "
                "so a task may not change them (a glob in owns is not enough).",
                kind,
                path,
                fix=revert + " Put fixtures in the test module itself; if the configuration "
                "really must change, ask a human to change it or to name this exact path in "
                "the plan's owns.",
            )
        ]

    findings: list[Finding] = []
    owned = matches(path, owns)
    if contents is not None and ch.status != "D":
        old, new = contents(path)
        embedded = classify.embedded_test_config_changed(path, old, new)
        if embedded:
            findings.append(
                blocking(
                    f"changes {embedded}. Test settings decide which tests run and how they are "
                    "judged; a task may not change them, even in a file it owns.",
                    "scope.test-config",
                    path,
                    fix="Restore those settings exactly; keep any other change you need.",
                )
            )
    if not owned:
        if classify.is_lock_file(path):
            msg = (
                f"{verb} the lock file {path}, which this task does not own. Lock files "
                "change only in the task that owns them."
            )
            fix = f"Restore {path}; if a dependency is needed, say so with `signal blocked`."
        elif classify.is_git_meta(path):
            msg = (
                f"{verb} git metadata ({path}) the task does not own; it can change how "
                "diffs are read or what is checked out."
            )
            fix = revert
        else:
            msg = f"{verb} {path}, outside the paths this task owns ({', '.join(owns)})."
            msg += _owner_hint(path, matches, others)
            fix = revert
            if ch.status == "D":
                fix += " For a deleted file, restore it."
        findings.append(blocking(msg, "scope.unowned", path, fix=fix))
        return findings

    if SYMLINK_MODE in (ch.new_mode,) and ch.status != "D":
        findings.append(_symlink_finding(path, contents))
    if GITLINK_MODE in (ch.old_mode, ch.new_mode):
        findings.append(
            warning(
                f"{verb} a submodule ({path}). "
                "Submodules pull code from elsewhere; review by hand.",
                "scope.submodule",
                path,
            )
        )
    return findings


def _symlink_finding(path: str, contents: Contents | None) -> Finding:
    target = None
    if contents is not None:
        target = (contents(path)[1] or "").strip() or None
    if target is None:
        return warning(f"adds a symbolic link at {path}.", "scope.symlink", path)
    joined = posixpath.normpath(posixpath.join(posixpath.dirname(path), target))
    if target.startswith("/") or joined == ".." or joined.startswith("../"):
        return blocking(
            f"adds a symbolic link {path} -> {target}, which points outside the repository.",
            "scope.symlink",
            path,
            fix="Replace the link by a real file inside the paths you own.",
        )
    return warning(f"adds a symbolic link {path} -> {target}.", "scope.symlink", path)
