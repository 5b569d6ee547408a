"""Routing integration failures: which files an output blames, and the task-branch refresh."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.git import git

from loop_orchestrator.config import WorkspaceConfig
from loop_orchestrator.errors import GitError
from loop_orchestrator.git import gateway as gitutil
from loop_orchestrator.verify import failing_files
from loop_orchestrator.workspace import workspace

FILES = [
    "app/__init__.py",
    "app/models.py",
    "app/service.py",
    "tests/test_models.py",
    "tests/test_service.py",
    "README.md",
]


def test_pytest_failures_name_the_test_files() -> None:
    out = "FAILED tests/test_service.py::test_profile - assert 1 == 2\n1 failed, 3 passed\n"
    assert failing_files(out, FILES) == ["tests/test_service.py"]


def test_unittest_failures_map_dotted_modules_to_files() -> None:
    out = (
        "FAIL: test_x (tests.test_models.ModelTest.test_x)\n"
        "ERROR: test_y (tests.test_service.ServiceTest)\n"
    )
    assert failing_files(out, FILES) == ["tests/test_models.py", "tests/test_service.py"]


def test_traceback_paths_in_a_temporary_checkout_match_by_suffix() -> None:
    out = (
        "Traceback (most recent call last):\n"
        '  File "/tmp/lo-check-abc/tests/test_models.py", line 9, in test_x\n'
        '  File "/tmp/lo-check-abc/app/models.py", line 3, in make\n'
        '  File "/usr/lib/python3.11/json/__init__.py", line 1, in loads\n'
    )
    assert failing_files(out, FILES) == ["tests/test_models.py", "app/models.py"]


def test_no_known_file_blamed_means_nothing_to_route() -> None:
    assert failing_files("Segmentation fault (core dumped)\n", FILES) == []


def test_other_mentions_are_a_fallback_only() -> None:
    assert failing_files("lint: app/service.py:3: E501 line too long\n", FILES) == [
        "app/service.py"
    ]


def _commit(repo: Path, path: str, text: str, message: str) -> None:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text, encoding="utf-8")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", message)


@pytest.mark.slow
def test_refresh_task_merges_staging_and_moves_the_task_start(git_repo: Path) -> None:
    ws = workspace.Workspace(git_repo, "r1", WorkspaceConfig())
    base = gitutil.rev_parse(git_repo, "HEAD")
    ws.create_staging(base)
    a = ws.ensure_worktree("a")
    b = ws.ensure_worktree("b")
    (a / "a.txt").write_text("a\n", encoding="utf-8")
    (b / "b.txt").write_text("b\n", encoding="utf-8")
    ca = ws.commit_task("a", "a")
    cb = ws.commit_task("b", "b")
    ws.merge_into_staging("a", ca, "a")
    ws.merge_into_staging("b", cb, "b")
    assert ws.task_start("a") == base

    start = ws.refresh_task("a")

    assert start == gitutil.rev_parse(git_repo, ws.task_branch("a"))
    assert ws.task_start("a") == start
    assert (a / "b.txt").read_text(encoding="utf-8") == "b\n"  # b's work is now in a's tree
    # the task's own next change is measured from the refresh, not from the run's base
    (a / "a.txt").write_text("a2\n", encoding="utf-8")
    new = ws.commit_task("a", "a again")
    assert [c.path for c in gitutil.changed_paths(git_repo, start, new)] == ["a.txt"]
    assert ws.refresh_task("a") == start  # nothing new on staging: nothing to do


@pytest.mark.slow
def test_refresh_task_refuses_a_dirty_worktree(git_repo: Path) -> None:
    ws = workspace.Workspace(git_repo, "r2", WorkspaceConfig())
    ws.create_staging(gitutil.rev_parse(git_repo, "HEAD"))
    a = ws.ensure_worktree("a")
    b = ws.ensure_worktree("b")
    (b / "b.txt").write_text("b\n", encoding="utf-8")
    ws.merge_into_staging("b", ws.commit_task("b", "b"), "b")
    (a / "wip.txt").write_text("unsaved\n", encoding="utf-8")
    with pytest.raises(GitError, match="uncommitted changes"):
        ws.refresh_task("a")
    assert (a / "wip.txt").exists()
    assert not (a / "b.txt").exists()
