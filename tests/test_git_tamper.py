"""Tamper-proof supervision on real repositories: git that agents cannot steer, refs checked
against lo-orch's own book, and staging that holds verified trees only.

Each attack is something an agent (same OS user, shell in its worktree, which shares the
user's ``.git``) can do. Where it helps, a negative control shows the attack working on
plain git, so the test proves the defence and not a broken attack.
"""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import pytest
from helpers.git import git

from loop_orchestrator.config import WorkspaceConfig
from loop_orchestrator.errors import GitError, MergeConflictError, RefTamperedError, StateError
from loop_orchestrator.git.checkouts import temp_checkout
from loop_orchestrator.git.gateway import _converts, added_lines, diff_text, file_at
from loop_orchestrator.git.refbook import INSTANCE_KEY, FileRefBook
from loop_orchestrator.plan.model import Task
from loop_orchestrator.runstate.state import RunDir
from loop_orchestrator.verify.verdict import deterministic_findings
from loop_orchestrator.workspace.workspace import Workspace
from loop_orchestrator.workspace.worktrees import dirty_paths

AUTHOR = {"author_name": "Lo Bot", "author_email": "bot@example.org"}
TOKEN = "ghp_Zq8XkP3vLm2NwR7tYb5HcJ4dFs6GaE1uTo9K"


def started(repo: Path, run: str = "r1") -> Workspace:
    ws = Workspace(repo, run, WorkspaceConfig.model_validate(AUTHOR))
    ws.preflight()
    ws.create_staging(ws.resolve_base(None))
    return ws


def write(root: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text, encoding="utf-8")


def work(ws: Workspace, task: str, files: dict[str, str]) -> str:
    write(ws.ensure_worktree(task), files)
    return ws.commit_task(task, f"task {task}")


def script(path: Path, body: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\n" + body + "\n", encoding="utf-8")
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def marker_script(tmp_path: Path, name: str) -> tuple[Path, Path]:
    """A script that leaves ``<name>.ran`` behind when anything runs it (and passes its
    input through, so it also works as a filter)."""
    marker = tmp_path / f"{name}.ran"
    return script(tmp_path / "bin" / name, f'touch "{marker}"\ncat'), marker


def head(repo: Path, rev: str = "HEAD") -> str:
    return git(repo, "rev-parse", rev).strip()


# item 6: no hook, fsmonitor, driver, attribute or config an agent wrote -----------------


@pytest.mark.slow
def test_planted_hooks_never_run(git_repo: Path, tmp_path: Path) -> None:
    hooks = git_repo / ".git" / "hooks"
    marker = tmp_path / "hook.ran"
    for name in (
        "pre-commit",
        "post-commit",
        "commit-msg",
        "post-checkout",
        "reference-transaction",
        "post-merge",
        "pre-auto-gc",
    ):
        # a reference-transaction hook that moves the feature branch after the review
        script(
            hooks / name,
            '[ -n "$IN_HOOK" ] && exit 0; export IN_HOOK=1\n'
            f'echo {name} >> "{marker}"\n'
            "git update-ref refs/heads/feat/r1 HEAD 2>/dev/null; exit 0",
        )
    ws = started(git_repo)
    commit = work(ws, "a", {"a.txt": "a\n"})
    staging = ws.merge_into_staging("a", commit, "A")
    with temp_checkout(git_repo, staging):
        pass
    assert ws.finish(staging) == staging
    ws.cleanup(["a"], delete_staging=True)
    assert not marker.exists()
    assert head(git_repo, "feat/r1") == staging
    # negative control: plain git runs the planted hook
    git(git_repo, "commit", "-q", "--allow-empty", "-m", "control")
    assert "reference-transaction" in marker.read_text(encoding="utf-8")


def test_fsmonitor_in_repo_config_never_runs(git_repo: Path, tmp_path: Path) -> None:
    monitor, marker = marker_script(tmp_path, "fsmonitor")
    git(git_repo, "config", "core.fsmonitor", str(monitor))
    ws = started(git_repo)
    commit = work(ws, "a", {"a.txt": "a\n"})
    ws.merge_into_staging("a", commit, "A")
    assert dirty_paths(ws.worktree_path("a")) == []
    assert not marker.exists()
    git(git_repo, "status", "--porcelain")  # negative control
    assert marker.exists()


def _secret_task(ws: Workspace) -> tuple[str, str]:
    commit = work(ws, "a", {"app/config.py": f'API = "x"\nTOKEN = "{TOKEN}"\n'})
    return ws.task_start("a"), commit


@pytest.mark.parametrize("where", ["tree", "info"])
def test_textconv_cannot_hide_a_token(git_repo: Path, where: str) -> None:
    # the driver drops every line holding the token from what `git diff` shows
    git(git_repo, "config", "diff.hide.textconv", "sed -e /ghp_/d")
    ws = started(git_repo)
    if where == "info":
        write(git_repo / ".git" / "info", {"attributes": "*.py diff=hide\n"})
    else:
        write(ws.ensure_worktree("a"), {".gitattributes": "*.py diff=hide\n"})
    base, commit = _secret_task(ws)
    # the attack works on plain git (in the worktree, where the task's attributes are)
    assert TOKEN not in git(ws.worktree_path("a"), "diff", base, commit)
    assert TOKEN in diff_text(git_repo, base, commit)  # the Gate 2 / auditor diff
    lines = [text for _, text in added_lines(git_repo, base, commit)["app/config.py"]]
    assert f'TOKEN = "{TOKEN}"' in lines
    task = Task(id="a", objective="o", owns=["app/**", ".gitattributes"], done=[])
    findings = deterministic_findings(git_repo, task, base, commit)[0]
    assert any(
        f.blocking and f.path == "app/config.py" and f.check.startswith("secrets") for f in findings
    ), findings


@pytest.mark.parametrize("attribute", ["-diff", "binary", "diff=ext"])
def test_binary_attributes_and_external_diff_cannot_hide_lines(
    git_repo: Path, tmp_path: Path, attribute: str
) -> None:
    external, marker = marker_script(tmp_path, "extdiff")
    git(git_repo, "config", "diff.ext.command", str(external))
    git(git_repo, "config", "diff.external", str(external))
    ws = started(git_repo)
    write(git_repo / ".git" / "info", {"attributes": f"*.py {attribute}\n"})
    base, commit = _secret_task(ws)
    text = diff_text(git_repo, base, commit)
    assert TOKEN in text and "Binary files" not in text
    assert not marker.exists()
    shown = git(git_repo, "diff", base, commit)
    assert TOKEN not in shown  # plain git: "Binary files differ" or the external tool


def test_replace_refs_do_not_change_what_is_verified(git_repo: Path) -> None:
    ws = started(git_repo)
    base = head(git_repo)
    bad = work(ws, "a", {"app/calc.py": "def add(a, b):\n    return 3  # stub\n"})
    path = ws.ensure_worktree("a")
    # a clean-looking commit, then the real one replaced by it for every plain git reader
    write(path, {"app/calc.py": "def add(a, b):\n    return a + b\n"})
    git(path, "commit", "-q", "-am", "clean")
    clean = head(path)
    git(path, "replace", "-f", bad, clean)
    assert "a + b" in git(git_repo, "show", f"{bad}:app/calc.py")  # the attack works
    assert "return 3" in (file_at(git_repo, bad, "app/calc.py") or "")
    assert "return 3" in diff_text(git_repo, base, bad)
    with temp_checkout(git_repo, bad) as tree:
        assert "return 3" in (tree / "app" / "calc.py").read_text(encoding="utf-8")


@pytest.mark.parametrize(
    ("args", "converts"),
    [
        (["worktree", "list", "--porcelain"], False),
        (["worktree", "prune"], False),
        (["worktree", "add", "--detach", "/tmp/x", "HEAD"], True),
        (["worktree", "remove", "--force", "/tmp/x"], True),  # (it looks for changes first)
        (["worktree", "repair"], True),  # (not known to touch no content: overridden)
        (["worktree"], True),
        (["-c", "a.b=worktree", "worktree", "list"], False),
        (["-C", "worktree", "worktree", "list"], True),  # (read as the subcommand: overridden)
        (["diff", "--stat"], True),
        (["diff", "--cached", "--no-renames", "--name-status", "-z"], False),
        (["diff", "--cached", "--no-renames", "--raw", "-z"], False),
        (["diff", "--staged", "--quiet"], False),
        (["diff", "--cached", "--name-only", "--diff-filter=AMT"], False),
        (["diff", "--name-only"], True),  # (the working tree against the index)
        (["diff", "--cached"], True),  # (a patch: textconv)
        (["diff", "--cached", "--name-only", "--", "a.txt"], True),
        (["diff", "--cached", "--name-only", "-p"], True),
        (["status", "--porcelain"], True),
        (["rev-parse", "HEAD"], False),
        (["for-each-ref", "refs/heads/"], False),
    ],
)
def test_only_what_can_touch_content_pays_for_the_driver_overrides(
    args: list[str], converts: bool
) -> None:
    """Filter and merge drivers are turned off for every command that may read or write a
    file's content (a ``git config --list`` first); ``git worktree list`` and ``prune`` only
    read the admin folders, and a diff of the index against HEAD that lists names only
    compares object names. Anything not known to be so keeps the overrides."""
    assert _converts(args) is converts


@pytest.mark.slow
def test_filter_drivers_never_run_and_change_nothing(git_repo: Path, tmp_path: Path) -> None:
    clean, marker = marker_script(tmp_path, "clean")
    smudge = script(tmp_path / "bin" / "smudge", f'touch "{marker}"\necho smudged')
    git(git_repo, "config", "filter.evil.clean", str(clean))
    git(git_repo, "config", "filter.evil.smudge", str(smudge))
    git(git_repo, "config", "filter.evil.required", "true")
    ws = started(git_repo)
    write(git_repo / ".git" / "info", {"attributes": "*.txt filter=evil\n"})
    commit = work(
        ws,
        "a",
        {"a.txt": "real content\n", ".gitattributes": "*.py filter=evil\n", "app/x.py": "X = 1\n"},
    )
    assert not marker.exists()
    assert file_at(git_repo, commit, "a.txt") == "real content\n"
    staging = ws.merge_into_staging("a", commit, "A")
    with temp_checkout(git_repo, staging) as tree:
        assert (tree / "a.txt").read_text(encoding="utf-8") == "real content\n"
        assert (tree / "app" / "x.py").read_text(encoding="utf-8") == "X = 1\n"
    assert not marker.exists()
    git(ws.worktree_path("a"), "add", "--renormalize", ".")  # negative control
    assert marker.exists()


@pytest.mark.slow
def test_merge_driver_cannot_resolve_a_conflict(git_repo: Path, tmp_path: Path) -> None:
    marker = tmp_path / "merge.ran"
    git(git_repo, "config", "merge.evil.driver", f'touch "{marker}"; cp %B %A')
    write(git_repo / ".git" / "info", {"attributes": "* merge=evil\n"})
    ws = started(git_repo)
    a = work(ws, "a", {"README.md": "# from a\n"})
    b = work(ws, "b", {"README.md": "# from b\n"})
    ws.merge_into_staging("a", a, "A")
    with pytest.raises(MergeConflictError):
        ws.merge_into_staging("b", b, "B")
    assert not marker.exists()
    # the task worktree's own merges (staging brought in) use the plain text merge too
    with pytest.raises(MergeConflictError):
        ws.refresh_task("b")
    assert not marker.exists()


def test_included_config_is_neutralised(git_repo: Path, tmp_path: Path) -> None:
    hook_dir = tmp_path / "evil-hooks"
    monitor, marker = marker_script(tmp_path, "anything")
    for name in ("post-commit", "reference-transaction"):
        script(hook_dir / name, f'touch "{marker}"')
    evil = tmp_path / "evil.cfg"
    evil.write_text(
        f"[core]\n\thooksPath = {hook_dir}\n\tfsmonitor = {monitor}\n"
        f"[diff]\n\texternal = {monitor}\n"
        f'[filter "x"]\n\tclean = {monitor}\n\tsmudge = {monitor}\n',
        encoding="utf-8",
    )
    git(git_repo, "config", "include.path", str(evil))
    write(git_repo / ".git" / "info", {"attributes": "* filter=x\n"})
    ws = started(git_repo)
    commit = work(ws, "a", {"a.txt": "a\n"})
    staging = ws.merge_into_staging("a", commit, "A")
    assert "+a" in diff_text(git_repo, head(git_repo), staging)
    with temp_checkout(git_repo, staging):
        pass
    ws.finish(staging)
    assert not marker.exists()
    git(git_repo, "status")  # negative control: plain git follows the include
    assert marker.exists()


def test_user_global_config_edits_are_ignored(git_repo: Path, tmp_path: Path) -> None:
    hook_dir = tmp_path / "global-hooks"
    tool, marker = marker_script(tmp_path, "global")
    script(hook_dir / "post-commit", f'touch "{marker}"')
    text = (
        f"[core]\n\thooksPath = {hook_dir}\n\tfsmonitor = {tool}\n"
        f"\tattributesFile = {tmp_path / 'global-attributes'}\n"
        f'[diff "hide"]\n\ttextconv = sed -e /ghp_/d\n'
    )
    (tmp_path / "global-attributes").write_text("*.py diff=hide\n", encoding="utf-8")
    home = Path(os.environ["HOME"])
    # the same user: ~/.gitconfig, the XDG file, and the file the tests point git at
    for path in (
        home / ".gitconfig",
        home / ".config" / "git" / "config",
        Path(os.environ["GIT_CONFIG_GLOBAL"]),
    ):
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as fh:
            fh.write(text)
    ws = started(git_repo)
    base, commit = _secret_task(ws)
    assert TOKEN not in git(git_repo, "diff", base, commit)  # negative control
    assert TOKEN in diff_text(git_repo, base, commit)
    ws.merge_into_staging("a", commit, "A")
    assert not marker.exists()


# item 4: refs compared with the book -----------------------------------------------------


def test_staging_moved_outside_lo_orch_stops_the_merge(git_repo: Path) -> None:
    ws = started(git_repo)
    a = work(ws, "a", {"a.txt": "a\n"})
    staging = ws.merge_into_staging("a", a, "A")
    b = work(ws, "b", {"b.txt": "b\n"})
    # an agent points staging at its own, unverified commit
    git(git_repo, "update-ref", "refs/heads/lo/r1/staging", b)
    with pytest.raises(RefTamperedError) as err:
        ws.merge_into_staging("b", b, "B")
    message = err.value.render()
    assert "refs/heads/lo/r1/staging" in message
    assert f"expected {staging}" in message and f"found {b}" in message
    assert head(git_repo, "lo/r1/staging") == b  # nothing changed by lo-orch
    with pytest.raises(RefTamperedError, match="lo/r1/staging"):
        ws.finish(b)
    with pytest.raises(RefTamperedError, match="lo/r1/staging"):
        ws.branches.check_refs()
    assert not isinstance(err.value, GitError)  # no git-failure fallback swallows it


def test_deleted_staging_and_moved_feature_are_named(git_repo: Path) -> None:
    ws = started(git_repo)
    staging = ws.merge_into_staging("a", work(ws, "a", {"a.txt": "a\n"}), "A")
    ws.finish(staging)
    git(git_repo, "update-ref", "refs/heads/feat/r1", head(git_repo, "main"))
    with pytest.raises(RefTamperedError, match=r"refs/heads/feat/r1.*found"):
        ws.branches.check_refs()
    git(git_repo, "update-ref", "refs/heads/feat/r1", staging)
    git(git_repo, "update-ref", "-d", "refs/heads/lo/r1/staging")
    with pytest.raises(RefTamperedError, match=r"lo/r1/staging.*found absent"):
        ws.branches.check_refs()


def test_a_crash_between_update_and_record_is_recognised(git_repo: Path) -> None:
    ws = started(git_repo)
    commit = work(ws, "a", {"a.txt": "a\n"})
    book = ws.branches.refs
    recorded = book.get("refs/heads/lo/r1/staging")
    real_change = book.change

    class Crash(Exception):
        pass

    def crash_on_record(set_: dict[str, str], drop: tuple[str, ...] = ()) -> None:
        if "refs/heads/lo/r1/staging" in set_:  # (the move's record, after git's update)
            raise Crash
        real_change(set_, drop)

    book.change = crash_on_record  # type: ignore[method-assign]
    with pytest.raises(Crash):
        ws.merge_into_staging("a", commit, "A")
    book.change = real_change  # type: ignore[method-assign]
    moved = head(git_repo, "lo/r1/staging")
    assert moved != recorded and book.get("refs/heads/lo/r1/staging") == recorded
    # resume: lo-orch's own move is adopted, and the task is not merged a second time
    fresh = Workspace(git_repo, "r1", WorkspaceConfig.model_validate(AUTHOR))
    assert fresh.merge_into_staging("a", commit, "A") == moved
    assert fresh.branches.refs.get("refs/heads/lo/r1/staging") == moved
    assert git(git_repo, "rev-list", "--count", f"{recorded}..{moved}").strip() == "1"


def test_refs_book_lives_outside_the_repository(git_repo: Path) -> None:
    ws = started(git_repo)
    work(ws, "a", {"a.txt": "a\n"})
    book = ws.branches.refs
    assert isinstance(book, FileRefBook)
    assert git_repo not in book.path.parents
    assert stat.S_IMODE(book.path.parent.stat().st_mode) == 0o700
    assert set(book.items()) >= {"base", "refs/heads/lo/r1/staging", "start/a"}
    config = (git_repo / ".git" / "config").read_text(encoding="utf-8")
    assert "lo-orch" not in config


def test_a_change_of_the_book_is_one_write_and_an_unchanged_book_is_not_written(
    tmp_path: Path,
) -> None:
    """``FileRefBook.change`` sets and drops names in one write of the file (a ref's move
    and the note written ahead of it); what changes nothing writes nothing; the instance
    stamp is the book's own and no name of a change; an earlier instance's book reads as
    empty and the first change replaces it whole."""
    path = tmp_path / "refs.json"
    book = FileRefBook(path, "run-1")
    book.change({"next/refs/heads/s": "a" * 40})
    book.change({"refs/heads/s": "a" * 40, "start/t": "b" * 40}, ("next/refs/heads/s",))
    assert book.items() == {"refs/heads/s": "a" * 40, "start/t": "b" * 40}
    before = path.stat()
    book.change({"start/t": "b" * 40}, ("never/there",))  # nothing changes: not written
    book.set("refs/heads/s", "a" * 40)
    book.drop("gone")
    after = path.stat()
    assert (after.st_ino, after.st_mtime_ns) == (before.st_ino, before.st_mtime_ns)
    book.change({}, ("refs/heads/s",))
    assert book.items() == {"start/t": "b" * 40} and path.stat().st_ino != before.st_ino
    for bad in ({INSTANCE_KEY: "run-2"}, {}):
        with pytest.raises(ValueError, match="the book's own key"):
            book.change(bad, () if bad else (INSTANCE_KEY,))
    assert json.loads(path.read_text(encoding="utf-8"))[INSTANCE_KEY] == "run-1"
    later = FileRefBook(path, "run-2")
    assert later.items() == {}
    later.change({"start/u": "c" * 40})
    assert json.loads(path.read_text(encoding="utf-8")) == {
        "start/u": "c" * 40,
        INSTANCE_KEY: "run-2",
    }


@pytest.mark.slow
def test_forged_start_commit_in_config_has_no_effect(git_repo: Path) -> None:
    ws = started(git_repo)
    start = ws.task_start("a") if ws.branches.refs.get("start/a") else None
    assert start is None
    path = ws.ensure_worktree("a")
    start = ws.task_start("a")
    write(path, {"app/other.py": "OUT_OF_SCOPE = 1\n"})
    git(path, "add", "-A")
    git(path, "commit", "-q", "-m", "out of scope")
    write(path, {"app/mine.py": "MINE = 1\n"})
    commit = ws.commit_task("a", "task a")
    # the old markers, pointed at the agent's own out-of-scope commit (widening the base)
    forged = head(path, "HEAD~1")
    git(git_repo, "config", "branch.lo/r1/a.lo-orch-base", forged)
    git(git_repo, "config", "branch.lo/r1/a.lo-orch-run", "r1")
    assert (
        Workspace(git_repo, "r1", WorkspaceConfig.model_validate(AUTHOR)).task_start("a") == start
    )
    task = Task(id="a", objective="o", owns=["app/mine.py"], done=[])
    findings = deterministic_findings(git_repo, task, ws.task_start("a"), commit)[0]
    assert any(f.blocking and f.path == "app/other.py" for f in findings), findings
    # and a config marker does not make a user's branch lo-orch's
    git(git_repo, "branch", "lo-user", "main")
    git(git_repo, "config", "branch.feat/r2.lo-orch-run", "r2")
    user = git(git_repo, "commit-tree", "-p", "main", "-m", "the user's own", "main^{tree}")
    git(git_repo, "branch", "feat/r2", user.strip())
    other = started(git_repo, "r2")
    reviewed = other.merge_into_staging("x", work(other, "x", {"x.txt": "x\n"}), "X")
    with pytest.raises(GitError, match="feat/r2 holds commits the reviewed result"):
        other.finish(reviewed)
    assert head(git_repo, "feat/r2") == user.strip()


# item 5: rejected rounds never reach staging or the feature branch ----------------------


@pytest.mark.slow
def test_rejected_rounds_are_unreachable_from_staging_and_feature(git_repo: Path) -> None:
    ws = started(git_repo)
    base = head(git_repo)
    round1 = work(
        ws,
        "a",
        {
            "app/calc.py": "def add(a, b):\n    raise NotImplementedError  # STUB-ROUND-1\n",
            "tests/test_calc.py": f"def test_add():\n    pass  # {TOKEN}\n",
        },
    )
    round2 = work(
        ws,
        "a",
        {
            "app/calc.py": "def add(a, b):\n    return a + b\n",
            "tests/test_calc.py": "from app.calc import add\n\n\ndef test_add():\n"
            "    assert add(1, 2) == 3\n",
        },
    )
    assert round1 != round2
    staging = ws.merge_into_staging("a", round2, "A")
    ws.finish(staging)
    for ref in ("lo/r1/staging", "feat/r1"):
        reachable = git(git_repo, "rev-list", "--objects", ref).split()
        assert round1 not in reachable and round2 not in reachable
        history = git(git_repo, "log", "-p", "--format=%H %B", ref)
        assert "STUB-ROUND-1" not in history and TOKEN not in history
        assert git(git_repo, "rev-list", "--count", f"{base}..{ref}").strip() == "1"
    # the rounds stay on the task branch until cleanup (the negative control)
    assert "STUB-ROUND-1" in git(git_repo, "log", "-p", "lo/r1/a")
    report = ws.cleanup(["a"])
    assert "lo/r1/a" in report.branches_deleted  # its verified tip is on staging


def test_cleanup_keeps_a_task_branch_with_work_after_verification(git_repo: Path) -> None:
    ws = started(git_repo)
    commit = work(ws, "a", {"a.txt": "a\n"})
    ws.merge_into_staging("a", commit, "A")
    later = work(ws, "a", {"a.txt": "changed after verification\n"})
    assert later != commit
    report = ws.cleanup(["a"])
    assert "lo/r1/a" in report.branches_kept
    assert head(git_repo, "lo/r1/a") == later


# integration and Gate 2 -----------------------------------------------------------------


def _awaiting_review(repo: Path, tmp_path: Path) -> tuple[Workspace, str, str]:
    """A run of one task, integrated, waiting for Gate 2: (workspace, staging, task commit).

    The task carries a token that a textconv driver of the repository hides from plain git.
    """
    from loop_orchestrator.commands.plan import plan_from_file
    from loop_orchestrator.config import load_settings
    from loop_orchestrator.runstate import create as runs
    from loop_orchestrator.workspace import integration

    plan_file = tmp_path / "plan.yaml"
    plan_file.write_text(
        "goal: g\nname: r1\ntasks:\n  - id: a\n    title: A\n"
        "    objective: o\n    owns: ['app/**', '.gitattributes']\n"
        "    done:\n      - criterion: c\n        check: 'true'\n",
        encoding="utf-8",
    )
    settings = load_settings(repo)
    plan_from_file(repo, plan_file, settings)
    runs.approve_plan(repo)
    git(repo, "config", "diff.hide.textconv", "sed -e /ghp_/d")
    ws = Workspace.for_run(repo, runs.open_record(repo).run, settings.workspace)
    ws.create_staging(head(repo))
    commit = work(
        ws, "a", {".gitattributes": "*.py diff=hide\n", "app/config.py": f'TOKEN = "{TOKEN}"\n'}
    )
    staging = ws.merge_into_staging("a", commit, "A")
    plan, _ = runs.read_plan(RunDir(repo))
    assert integration.integrate(
        repo, settings, plan, skipped=[], record=runs.open_record(repo)
    ).passed
    return ws, staging, commit


def test_gate2_shows_raw_content_and_lands_the_reviewed_commit(
    git_repo: Path, tmp_path: Path, tmux_socket: str
) -> None:
    from loop_orchestrator.workspace import integration

    ws, staging, _ = _awaiting_review(git_repo, tmp_path)
    # after the review, a hook would move the feature branch: it never runs
    script(
        git_repo / ".git" / "hooks" / "reference-transaction",
        '[ -n "$IN_HOOK" ] && exit 0; export IN_HOOK=1\n'
        f"git update-ref refs/heads/feat/r1 {head(git_repo, 'main')} 2>/dev/null; exit 0",
    )
    review = integration.review(git_repo)
    assert review.commit == staging
    assert TOKEN in review.diff
    # control: plain git where the task's attributes are on disk hides it
    assert TOKEN not in git(ws.worktree_path("a"), "diff", review.state.base_sha, staging)
    integration.merge(git_repo, review)
    assert head(git_repo, "feat/r1") == staging
    assert ws.branches.refs.get("refs/heads/feat/r1") is None  # handed over to the user


def test_gate2_and_integration_refuse_moved_refs_and_a_forged_base(
    git_repo: Path, tmp_path: Path
) -> None:
    from loop_orchestrator.config import load_settings
    from loop_orchestrator.runstate import create as runs
    from loop_orchestrator.runstate.state import Store
    from loop_orchestrator.workspace import integration

    _ws, staging, commit = _awaiting_review(git_repo, tmp_path)
    store = Store.for_repo(git_repo)
    base = store.read_run().base_sha
    # run.json is agent-writable: a base next to the staging tip would hide the task's diff;
    # Gate 2 reads the supervisor's record, so the forged base is not even looked at
    store.update_run(lambda s: setattr(s, "base_sha", commit))
    review = integration.review(git_repo)
    assert review.commit == staging
    assert review.state.base_sha == base
    assert TOKEN in review.diff
    git(git_repo, "update-ref", "refs/heads/lo/r1/staging", commit)
    with pytest.raises(RefTamperedError, match=f"lo/r1/staging.*expected {staging}"):
        integration.review(git_repo)
    plan, _ = runs.read_plan(RunDir(git_repo))
    with pytest.raises(RefTamperedError, match="lo/r1/staging"):
        integration.integrate(
            git_repo, load_settings(git_repo), plan, skipped=[], record=runs.open_record(git_repo)
        )
    assert "feat/r1" not in git(git_repo, "branch", "--list", "feat/r1")


@pytest.mark.slow
def test_grafts_do_not_fake_history(git_repo: Path) -> None:
    from loop_orchestrator.git.gateway import is_ancestor

    ws = started(git_repo)
    staging = ws.merge_into_staging("a", work(ws, "a", {"a.txt": "a\n"}), "A")
    unverified = work(ws, "b", {"b.txt": "never verified\n"})
    # a graft claims the unverified commit is part of staging's history
    write(git_repo / ".git" / "info", {"grafts": f"{staging} {unverified}\n"})
    control = git(git_repo, "rev-list", "lo/r1/staging")
    assert unverified in control  # plain git believes the graft
    assert not is_ancestor(git_repo, unverified, staging)
    assert not ws.is_merged(unverified)
    merged = ws.merge_into_staging("b", unverified, "B")  # merged for real, not skipped
    assert merged != staging
    assert file_at(git_repo, merged, "b.txt") == "never verified\n"


def test_the_book_read_again_sees_every_write_also_one_made_by_another_process(
    tmp_path: Path,
) -> None:
    """The book's file is parsed again only when its stat changed: each write through any
    ``FileRefBook`` (another lo-orch command's too) and an edit by hand are seen at the next
    read, and a book made unreadable by hand is refused, never answered from memory."""
    path = tmp_path / "refs.json"
    mine, other = FileRefBook(path, "run-1"), FileRefBook(path, "run-1")
    mine.set("start/a", "a" * 40)
    assert other.items() == mine.items() == {"start/a": "a" * 40}
    other.set("start/b", "b" * 40)
    assert mine.get("start/b") == "b" * 40
    got = mine.items()
    got["start/c"] = "c" * 40  # (a caller's copy: the book is not changed through it)
    assert "start/c" not in mine.items()
    data = json.loads(path.read_text(encoding="utf-8"))
    data["start/a"] = "d" * 40  # the same size, written in place (a later time stamp:
    time.sleep(0.05)  # the kernel's clock for them moves in steps of a few ms)
    with path.open("r+", encoding="utf-8") as fh:
        fh.write(json.dumps(data, indent=1, sort_keys=True) + "\n")
    assert mine.get("start/a") == "d" * 40
    path.write_text("{not json", encoding="utf-8")
    with pytest.raises(StateError, match="not valid JSON"):
        mine.items()
