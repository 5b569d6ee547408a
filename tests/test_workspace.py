"""The git workspace layer on real repositories: preflight, branches, worktrees, commits,
merges, Gate 2 and cleanup, including every "checked by" case of issue 3."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from helpers.git import git

from loop_orchestrator.config import WorkspaceConfig
from loop_orchestrator.errors import (
    CommandError,
    GateError,
    GitError,
    MergeConflictError,
    RefMovedError,
    RefTamperedError,
    SecretFileError,
    StaleReviewError,
)
from loop_orchestrator.git import checkouts as tempcheckout
from loop_orchestrator.git.gateway import changed_paths
from loop_orchestrator.git.refread import update_ref
from loop_orchestrator.workspace.workspace import Workspace, init_repo
from loop_orchestrator.workspace.worktrees import dirty_paths

AUTHOR = {"author_name": "Lo Bot", "author_email": "bot@example.org"}


def make_ws(repo: Path, run: str = "r1", **settings: object) -> Workspace:
    return Workspace(repo, run, WorkspaceConfig.model_validate({**AUTHOR, **settings}))


def started(repo: Path, run: str = "r1", **settings: object) -> Workspace:
    ws = make_ws(repo, run, **settings)
    ws.preflight()
    ws.create_staging(ws.resolve_base(None))
    return ws


def work(ws: Workspace, task: str, files: dict[str, str], delete: tuple[str, ...] = ()) -> str:
    path = ws.ensure_worktree(task)
    for rel, text in files.items():
        (path / rel).parent.mkdir(parents=True, exist_ok=True)
        (path / rel).write_text(text, encoding="utf-8")
    for rel in delete:
        (path / rel).unlink()
    return ws.commit_task(task, f"task {task}")


def branches(repo: Path) -> dict[str, str]:
    out = git(repo, "for-each-ref", "--format=%(refname:short) %(objectname)", "refs/heads/")
    return dict(line.split(" ") for line in out.splitlines())


def snapshot(repo: Path) -> tuple[dict[str, str], dict[str, bytes], str]:
    """Every branch, every file outside .git and the status: to prove nothing changed."""
    files = {
        p.relative_to(repo).as_posix(): p.read_bytes()
        for p in sorted(repo.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(repo).parts
    }
    return branches(repo), files, git(repo, "status", "--porcelain", "-uall")


def parents(repo: Path, sha: str) -> list[str]:
    return git(repo, "rev-list", "--parents", "-n1", sha).split()[1:]


def agent_commit(path: Path, name: str, text: str, message: str) -> str:
    """Write, add and commit one file in a worktree, as an agent would; the new sha."""
    (path / name).write_text(text, encoding="utf-8")
    git(path, "add", name)
    git(path, "commit", "-q", "--no-gpg-sign", "-m", message)
    return git(path, "rev-parse", "HEAD").strip()


# preflight ---------------------------------------------------------------------------


def test_dirty_main_checkout_is_refused_and_left_alone(git_repo: Path) -> None:
    (git_repo / "README.md").write_text("# my unsaved work\n", encoding="utf-8")
    (git_repo / "notes.txt").write_text("draft\n", encoding="utf-8")
    before = snapshot(git_repo)
    ws = make_ws(git_repo)
    with pytest.raises(GitError, match="uncommitted changes") as err:
        ws.preflight()
    assert "README.md" in err.value.message and "notes.txt" in err.value.message
    assert "--allow-dirty" in (err.value.hint or "")
    assert snapshot(git_repo) == before
    ws.preflight(allow_dirty=True)
    make_ws(git_repo, allow_dirty=True).preflight()
    base = ws.resolve_base(None)
    ws.create_staging(base)
    path = ws.ensure_worktree("a")
    # The run starts from the commit: the uncommitted edit is not swept into it.
    assert (path / "README.md").read_text(encoding="utf-8") == "# sample\n"
    assert not (path / "notes.txt").exists()
    assert (git_repo / "README.md").read_text(encoding="utf-8") == "# my unsaved work\n"


def test_preflight_writes_excludes_once_and_ignores_own_folders(git_repo: Path) -> None:
    (git_repo / ".orchestration").mkdir()
    (git_repo / ".orchestration" / "plan.json").write_text("{}", encoding="utf-8")
    ws = make_ws(git_repo)
    ws.preflight()
    ws.preflight()
    exclude = (git_repo / ".git" / "info" / "exclude").read_text(encoding="utf-8")
    assert exclude.count("/.orchestration/\n") == 1 and exclude.count("/.worktrees/\n") == 1
    assert git(git_repo, "status", "--porcelain", "-uall") == ""
    assert not (git_repo / ".gitignore").exists()  # the user's .gitignore is never edited


def test_preflight_refuses_subfolder_and_empty_repo(git_repo: Path, tmp_path: Path) -> None:
    with pytest.raises(GitError, match="not the top of its git checkout"):
        make_ws(git_repo / "app").preflight()
    empty = tmp_path / "empty"
    empty.mkdir()
    git(empty, "init", "-q")
    with pytest.raises(GitError, match="has no commits yet"):
        make_ws(empty).preflight()
    with pytest.raises(GitError, match="is not inside a git repository"):
        make_ws(tmp_path).preflight()


def test_resolve_base(git_repo: Path) -> None:
    ws = make_ws(git_repo)
    head = git(git_repo, "rev-parse", "HEAD").strip()
    assert ws.resolve_base(None) == head
    assert ws.resolve_base("main") == head
    with pytest.raises(GitError, match="unknown revision 'develop'"):
        ws.resolve_base("develop")


def test_invalid_run_and_task_names(git_repo: Path) -> None:
    with pytest.raises(GitError, match="invalid run name"):
        make_ws(git_repo, run="Bad Name")
    ws = make_ws(git_repo)
    for bad in ("staging", "Upper", "-x", "a/b", ""):
        with pytest.raises(GitError, match="invalid task id"):
            ws.task_branch(bad)
    assert ws.task_branch("a-1") == "lo/r1/a-1"
    assert ws.staging_branch == "lo/r1/staging"
    assert ws.branches.feature_branch == "feat/r1"


# init outside a repository -----------------------------------------------------------


def test_init_refuses_nested_directory(git_repo: Path) -> None:
    nested = git_repo / "sub"
    nested.mkdir()
    (nested / "code.py").write_text("x = 1\n", encoding="utf-8")
    before = snapshot(git_repo)
    with pytest.raises(GitError, match="inside the git repository") as err:
        init_repo(nested)
    assert str(git_repo) in err.value.message
    assert not (nested / ".git").exists()
    assert snapshot(git_repo) == before


@pytest.mark.parametrize(
    "secret",
    [".env", ".env.local", "deploy/server.pem", "my_credentials.json", "id_rsa", "tls.key"],
)
def test_init_refuses_folder_with_secrets(tmp_path: Path, secret: str) -> None:
    folder = tmp_path / "project"
    (folder / secret).parent.mkdir(parents=True, exist_ok=True)
    (folder / secret).write_text("TOKEN=abc\n", encoding="utf-8")
    (folder / "main.py").write_text("print(1)\n", encoding="utf-8")
    with pytest.raises(GitError, match="secret-like files") as err:
        init_repo(folder)
    assert secret in err.value.message
    assert not (folder / ".git").exists()
    assert sorted(p.name for p in folder.rglob("*") if p.is_file()) == sorted(
        ["main.py", Path(secret).name]
    )


def test_init_refuses_folder_holding_a_repository(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    (folder / "vendor" / "lib").mkdir(parents=True)
    git(folder / "vendor" / "lib", "init", "-q")
    with pytest.raises(GitError, match="holds other git repositories"):
        init_repo(folder)
    assert not (folder / ".git").exists()


def test_init_creates_first_commit(tmp_path: Path) -> None:
    folder = tmp_path / "project"
    (folder / "src").mkdir(parents=True)
    (folder / "src" / "main.py").write_text("print(1)\n", encoding="utf-8")
    (folder / ".orchestration").mkdir()
    (folder / ".orchestration" / "plan.json").write_text("{}", encoding="utf-8")
    root = init_repo(folder, WorkspaceConfig.model_validate(AUTHOR))
    assert root == folder.resolve()
    assert git(folder, "ls-files").split() == ["src/main.py"]
    assert git(folder, "log", "--format=%an <%ae>|%s").strip() == (
        "Lo Bot <bot@example.org>|lo-orch: initial commit"
    )
    assert "/.worktrees/" in (folder / ".git" / "info" / "exclude").read_text(encoding="utf-8")
    assert init_repo(folder) == root  # already a repository: nothing new
    assert git(folder, "rev-list", "--count", "HEAD").strip() == "1"


# branches ------------------------------------------------------------------------------


def test_branch_name_clashes_are_refused(git_repo: Path) -> None:
    main = git(git_repo, "rev-parse", "HEAD").strip()
    git(git_repo, "branch", "lo/r1/api")
    git(git_repo, "branch", "feat/r2")
    git(git_repo, "branch", "lo/r3")
    before = snapshot(git_repo)
    with pytest.raises(GitError, match="lo/r1/api already exists") as err:
        make_ws(git_repo).check_branch_names(["api", "ui"])
    assert "never adopts" in (err.value.hint or "")
    # an existing feature branch is Gate 2's to judge (moved only forward), not a clash
    make_ws(git_repo, "r2").check_branch_names(["api"])
    with pytest.raises(GitError, match="branch lo/r3 exists, so git cannot also hold"):
        make_ws(git_repo, "r3").check_branch_names(["api"])
    git(git_repo, "branch", "feat/custom/x")
    with pytest.raises(GitError, match="git cannot also hold a branch feat/custom"):
        make_ws(git_repo, "r4").check_branch_names(["api"], feature="feat/custom")
    git(git_repo, "branch", "-D", "feat/custom/x")
    with pytest.raises(GitError, match="invalid task id"):
        make_ws(git_repo, "r4").check_branch_names(["staging"])
    with pytest.raises(GitError, match="invalid branch name"):
        make_ws(git_repo, "r4").check_branch_names(["api"], feature="bad..name")
    with pytest.raises(GitError, match="already exists"):
        started(git_repo).ensure_worktree("api")
    assert branches(git_repo)["lo/r1/api"] == main
    assert not (git_repo / ".worktrees" / "r1" / "api").exists()
    assert snapshot(git_repo)[1] == before[1]
    ws = make_ws(git_repo, "r5")
    ws.check_branch_names(["api"])  # nothing of r5 exists yet: fine
    ws.create_staging(main)
    ws.ensure_worktree("api")
    ws.check_branch_names(["api"])  # its own branches are not clashes


def test_user_staging_branch_is_never_taken_over(git_repo: Path) -> None:
    git(git_repo, "branch", "lo/r1/staging")
    before = snapshot(git_repo)
    ws = make_ws(git_repo)
    with pytest.raises(GitError, match="lo/r1/staging already exists"):
        ws.create_staging(ws.resolve_base(None))
    assert snapshot(git_repo) == before


@pytest.mark.slow
def test_create_staging_is_idempotent(git_repo: Path) -> None:
    ws = started(git_repo)
    base = ws.resolve_base(None)
    assert ws.create_staging(base) == base
    commit = work(ws, "a", {"a.txt": "a\n"})
    merged = ws.merge_into_staging("a", commit, "A")
    assert ws.create_staging(base) == merged  # resume keeps what staging already holds


# worktrees ----------------------------------------------------------------------------


def test_ensure_worktree_is_idempotent(git_repo: Path) -> None:
    ws = started(git_repo)
    path = ws.ensure_worktree("a")
    assert path == git_repo / ".worktrees" / "r1" / "a"
    assert git(path, "rev-parse", "--abbrev-ref", "HEAD").strip() == "lo/r1/a"
    assert git(path, "rev-parse", "HEAD") == git(git_repo, "rev-parse", "lo/r1/staging")
    (path / "wip.txt").write_text("agent work\n", encoding="utf-8")
    assert ws.ensure_worktree("a") == path
    assert (path / "wip.txt").read_text(encoding="utf-8") == "agent work\n"
    assert len(git(git_repo, "worktree", "list").splitlines()) == 2


def test_dependents_start_from_staging(git_repo: Path) -> None:
    ws = started(git_repo)
    commit = work(ws, "producer", {"app/models.py": "class User: ...\n"})
    staging = ws.merge_into_staging("producer", commit, "Producer")
    path = ws.ensure_worktree("consumer")
    assert git(path, "rev-parse", "HEAD").strip() == staging
    assert (path / "app" / "models.py").exists()


def test_worktree_on_foreign_branch_is_reported(git_repo: Path) -> None:
    ws = started(git_repo)
    git(git_repo, "worktree", "add", "-q", "-b", "mine", str(ws.worktree_path("a")))
    before = snapshot(git_repo)
    with pytest.raises(GitError, match="on mine that run r1 did not create"):
        ws.ensure_worktree("a")
    assert snapshot(git_repo) == before


@pytest.mark.slow
def test_task_branch_not_based_on_staging_is_not_trusted(git_repo: Path) -> None:
    ws = started(git_repo)
    base = ws.resolve_base(None)
    ws.merge_into_staging("a", work(ws, "a", {"a.txt": "a\n"}), "A")
    path = ws.ensure_worktree("b")
    git(path, "reset", "-q", "--hard", base)  # the branch no longer holds its launch commit
    with pytest.raises(GitError, match="lo/r1/b is not based on lo/r1/staging"):
        ws.ensure_worktree("b")
    git(git_repo, "worktree", "remove", str(path))
    with pytest.raises(GitError, match="not based on"):
        ws.ensure_worktree("b")  # also when only the branch is left
    assert not path.exists()


def test_stray_folder_is_kept_and_stale_record_is_pruned(git_repo: Path) -> None:
    ws = started(git_repo)
    stray = ws.worktree_path("a")
    stray.mkdir(parents=True)
    (stray / "keep.txt").write_text("mine\n", encoding="utf-8")
    with pytest.raises(GitError, match="is not a worktree of this repository"):
        ws.ensure_worktree("a")
    assert (stray / "keep.txt").read_text(encoding="utf-8") == "mine\n"
    path = ws.ensure_worktree("b")
    for child in sorted(path.rglob("*"), reverse=True):  # user deletes the folder by hand
        child.unlink() if child.is_file() or child.is_symlink() else child.rmdir()
    path.rmdir()
    assert ws.ensure_worktree("b") == path
    assert (path / "README.md").exists()


def test_run_setup(git_repo: Path) -> None:
    assert make_ws(git_repo).run_setup(git_repo) is None
    ws = started(git_repo, setup_command="cp README.md 'copied file.md'")
    path = ws.ensure_worktree("a")
    result = ws.run_setup(path)
    assert result is not None and result.ok
    assert (path / "copied file.md").read_text(encoding="utf-8") == "# sample\n"
    with pytest.raises(CommandError, match="exited 1"):
        make_ws(git_repo, setup_command="false").run_setup(path)
    with pytest.raises(CommandError, match=r"timed out after 0.3s"):
        make_ws(git_repo, setup_command="sleep 5", setup_timeout=0.3).run_setup(path)


# commits ---------------------------------------------------------------------------------


def test_commit_task_takes_everything_as_configured_author(git_repo: Path) -> None:
    ws = started(git_repo)
    base = ws.resolve_base(None)
    commit = work(
        ws, "a", {"README.md": "# new\n", "app/new.py": "x = 1\n"}, delete=("app/__init__.py",)
    )
    path = ws.worktree_path("a")
    assert commit == git(git_repo, "rev-parse", "lo/r1/a").strip()
    assert sorted((c.status, c.path) for c in changed_paths(git_repo, base, commit)) == [
        ("A", "app/new.py"),
        ("D", "app/__init__.py"),
        ("M", "README.md"),
    ]
    assert git(git_repo, "log", "-1", "--format=%an <%ae>|%cn|%s", commit).strip() == (
        "Lo Bot <bot@example.org>|Lo Bot|task a"
    )
    assert git(path, "status", "--porcelain") == ""
    assert ws.commit_task("a", "again") == commit  # nothing left: no empty commit


def test_a_deletion_or_a_mode_change_alone_is_committed(git_repo: Path) -> None:
    """What is staged decides the commit, deletions and mode changes included (one listing
    of the index against HEAD says both what is staged and whether anything is)."""
    ws = started(git_repo)
    path = ws.ensure_worktree("a")
    before = git(git_repo, "rev-parse", "lo/r1/a").strip()
    (path / "app" / "__init__.py").unlink()
    deleted = ws.commit_task("a", "only a deletion")
    assert deleted != before
    assert "app/__init__.py" not in git(git_repo, "ls-tree", "-r", "--name-only", deleted)
    (path / "README.md").chmod(0o755)
    moded = ws.commit_task("a", "only a mode")
    assert moded != deleted
    assert git(git_repo, "ls-tree", moded, "README.md").startswith("100755")
    assert ws.commit_task("a", "nothing") == moded


def test_commit_task_accepts_agent_commits(git_repo: Path) -> None:
    ws = started(git_repo)
    path = ws.ensure_worktree("a")
    by_agent = agent_commit(path, "a.txt", "a\n", "agent did it")
    assert ws.commit_task("a", "task a") == by_agent
    (path / "b.txt").write_text("b\n", encoding="utf-8")
    on_top = ws.commit_task("a", "task a")
    assert parents(git_repo, on_top) == [by_agent]


@pytest.mark.parametrize("secret", [".env", "config/server.pem", "keys/id_rsa", "app/.env.prod"])
def test_commit_task_refuses_secret_files(git_repo: Path, secret: str) -> None:
    ws = started(git_repo)
    path = ws.ensure_worktree("a")
    tip = git(git_repo, "rev-parse", "lo/r1/a")
    (path / "ok.py").write_text("x = 1\n", encoding="utf-8")
    (path / secret).parent.mkdir(parents=True, exist_ok=True)
    (path / secret).write_text("SECRET=1\n", encoding="utf-8")
    status = git(path, "status", "--porcelain", "-uall")
    with pytest.raises(SecretFileError, match="secret-like") as err:
        ws.commit_task("a", "task a")
    assert err.value.paths == [secret]
    assert git(git_repo, "rev-parse", "lo/r1/a") == tip
    assert git(path, "status", "--porcelain", "-uall") == status  # nothing staged
    assert (path / secret).exists()


def test_commit_task_refuses_secret_the_agent_committed(git_repo: Path) -> None:
    ws = started(git_repo)
    path = ws.ensure_worktree("a")
    agent_commit(path, "prod.key", "k\n", "oops")
    git(path, "rm", "-q", "prod.key")
    git(path, "commit", "-q", "--no-gpg-sign", "-m", "hide it")
    with pytest.raises(SecretFileError, match=r"prod\.key"):
        ws.commit_task("a", "task a")


def test_a_secret_on_a_branch_with_no_history_in_common_with_staging_is_refused(
    git_repo: Path,
) -> None:
    """An agent that puts its branch on a history of its own (an orphan commit holding a
    key, then one that hides it) does not slip past the check of committed files: with no
    common ancestor, every commit staging lacks is looked at."""
    ws = started(git_repo)
    path = ws.ensure_worktree("a")
    git(path, "checkout", "-q", "--orphan", "elsewhere")
    git(path, "rm", "-rq", "--cached", ".")
    agent_commit(path, "prod.key", "k\n", "a history of its own")
    git(path, "rm", "-q", "prod.key")
    git(path, "commit", "-q", "--no-gpg-sign", "-m", "hide it")
    git(path, "branch", "-f", "lo/r1/a", "HEAD")
    git(path, "checkout", "-q", "lo/r1/a")
    with pytest.raises(SecretFileError, match=r"prod\.key"):
        ws.commit_task("a", "task a")


def test_ignored_secret_is_not_committed_and_deleting_one_is_fine(git_repo: Path) -> None:
    (git_repo / ".gitignore").write_text(".env\n", encoding="utf-8")
    (git_repo / "old.pem").write_text("old\n", encoding="utf-8")
    git(git_repo, "add", "-A")
    git(git_repo, "commit", "-q", "--no-gpg-sign", "-m", "ignore env")
    ws = started(git_repo, setup_command="cp README.md .env")
    path = ws.ensure_worktree("a")
    ws.run_setup(path)
    commit = work(ws, "a", {"a.txt": "a\n"}, delete=("old.pem",))
    tree = git(git_repo, "ls-tree", "-r", "--name-only", commit).split()
    assert ".env" not in tree and "old.pem" not in tree and "a.txt" in tree


def test_commit_task_refuses_wrong_branch(git_repo: Path) -> None:
    ws = started(git_repo)
    path = ws.ensure_worktree("a")
    git(path, "switch", "-q", "-c", "elsewhere")
    with pytest.raises(GitError, match="is on elsewhere, not lo/r1/a"):
        ws.commit_task("a", "task a")
    with pytest.raises(GitError, match="has no worktree"):
        ws.commit_task("b", "task b")


# merges -----------------------------------------------------------------------------------


def test_merge_into_staging_one_commit_without_checkout(git_repo: Path) -> None:
    ws = started(git_repo)
    before = snapshot(git_repo)
    old = git(git_repo, "rev-parse", "lo/r1/staging").strip()
    commit = work(ws, "a", {"a.txt": "a\n"})
    assert ws.staging.merge_precheck(commit) == []
    new = ws.merge_into_staging("a", commit, "Add a")
    assert new == git(git_repo, "rev-parse", "lo/r1/staging").strip()
    # one new commit, even when ff was possible; its tree is the task's, not its history
    assert parents(git_repo, new) == [old]
    assert git(git_repo, "rev-parse", f"{new}^{{tree}}") == git(
        git_repo, "rev-parse", f"{commit}^{{tree}}"
    )
    assert git(git_repo, "log", "-1", "--format=%an|%s", new).strip() == (
        "Lo Bot|lo-orch: task a: Add a"
    )
    assert f"Lo-Orch-Verified: {commit}" in git(git_repo, "log", "-1", "--format=%B", new)
    assert ws.is_merged(commit)
    assert ws.merge_into_staging("a", commit, "Add a") == new  # crash-resume: no second merge
    assert git(git_repo, "rev-parse", "lo/r1/staging").strip() == new
    after = snapshot(git_repo)
    main_files = {k: v for k, v in after[1].items() if not k.startswith(".worktrees/")}
    assert main_files == before[1] and after[2] == before[2]  # main checkout untouched
    assert git(git_repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"


def test_conflicting_pair_is_reported_and_staging_kept(git_repo: Path) -> None:
    ws = started(git_repo)
    a = work(ws, "a", {"README.md": "# from a\n"})
    b = work(ws, "b", {"README.md": "# from b\n", "b.txt": "b\n"})
    c = work(ws, "c", {"c.txt": "c\n"})
    assert ws.staging.pairwise_precheck({"a": a, "b": b, "c": c}) == [("a", "b", ["README.md"])]
    staging = ws.merge_into_staging("a", a, "A")
    assert ws.staging.merge_precheck(b) == ["README.md"]
    before = snapshot(git_repo)
    with pytest.raises(MergeConflictError, match="task b conflicts with lo/r1/staging") as err:
        ws.merge_into_staging("b", b, "B")
    assert err.value.paths == ["README.md"]
    assert "Nothing was changed" in (err.value.hint or "")
    assert git(git_repo, "rev-parse", "lo/r1/staging").strip() == staging
    assert snapshot(git_repo) == before
    check = git_repo.parent / "staging-check"
    git(git_repo, "worktree", "add", "-q", "--detach", str(check), "lo/r1/staging")
    assert git(check, "status", "--porcelain", "-uall") == ""
    assert (check / "README.md").read_text(encoding="utf-8") == "# from a\n"
    assert not (git_repo / ".git" / "MERGE_HEAD").exists()
    assert ws.merge_into_staging("c", c, "C") != staging  # the run goes on


def test_staging_update_is_compare_and_swap(git_repo: Path) -> None:
    ws = started(git_repo)
    old = git(git_repo, "rev-parse", "lo/r1/staging").strip()
    commit = work(ws, "a", {"a.txt": "a\n"})
    moved = ws.merge_into_staging("a", commit, "A")
    with pytest.raises(RefMovedError, match="moved while lo-orch was updating it"):
        update_ref(git_repo, "lo/r1/staging", commit, old, "stale writer")
    assert git(git_repo, "rev-parse", "lo/r1/staging").strip() == moved


def test_a_merge_onto_staging_moved_by_someone_else_changes_nothing_and_says_so(
    git_repo: Path,
) -> None:
    """An agent's `git update-ref` of staging since the book recorded it: the next task's
    merge is refused (``RefTamperedError`` from the refs check; a move between that check
    and the swap is ``RefMovedError``, above): the supervisor puts staging back and makes
    the merge again. Staging stays where the agent put it until then."""
    ws = started(git_repo)
    ws.merge_into_staging("a", work(ws, "a", {"a.txt": "a\n"}), "A")
    rogue = work(ws, "b", {"b.txt": "b\n"})
    git(git_repo, "update-ref", "refs/heads/lo/r1/staging", rogue)
    with pytest.raises(RefTamperedError, match="lo/r1/staging was changed outside lo-orch"):
        ws.merge_into_staging("c", work(ws, "c", {"c.txt": "c\n"}), "C")
    assert git(git_repo, "rev-parse", "lo/r1/staging").strip() == rogue


def test_merge_refused_while_staging_is_checked_out(git_repo: Path) -> None:
    ws = started(git_repo)
    commit = work(ws, "a", {"a.txt": "a\n"})
    git(git_repo, "worktree", "add", "-q", str(git_repo.parent / "st"), "lo/r1/staging")
    with pytest.raises(GitError, match="is checked out at"):
        ws.merge_into_staging("a", commit, "A")


# Gate 2 --------------------------------------------------------------------------------------


def test_finish_sets_feature_to_reviewed_commit(git_repo: Path) -> None:
    ws = started(git_repo)
    reviewed = ws.merge_into_staging("a", work(ws, "a", {"a.txt": "a\n"}), "A")
    assert ws.finish(reviewed) == reviewed
    assert branches(git_repo)["feat/r1"] == reviewed  # exactly, no new merge commit
    newer = ws.merge_into_staging("b", work(ws, "b", {"b.txt": "b\n"}), "B")
    with pytest.raises(StaleReviewError, match="moved since the review") as err:
        ws.finish(reviewed)
    assert isinstance(err.value, GateError) and isinstance(err.value, GitError)
    assert branches(git_repo)["feat/r1"] == reviewed
    assert ws.finish(newer) == newer  # its own feature branch moves to a new review
    assert branches(git_repo)["feat/r1"] == newer


def test_finish_refuses_user_feature_branch(git_repo: Path) -> None:
    git(git_repo, "branch", "release")
    ws = started(git_repo)
    reviewed = ws.merge_into_staging("a", work(ws, "a", {"a.txt": "a\n"}), "A")
    before = branches(git_repo)
    git(git_repo, "commit", "-q", "--allow-empty", "--no-gpg-sign", "-m", "mine")
    git(git_repo, "branch", "-f", "release", "main")  # a commit the review does not hold
    before = branches(git_repo)
    with pytest.raises(GitError, match="release holds commits the reviewed result") as err:
        ws.finish(reviewed, feature="release")
    assert "--branch release-" in (err.value.hint or "")
    assert branches(git_repo) == before
    assert ws.finish(reviewed, feature="topic/profile") == reviewed
    assert branches(git_repo)["topic/profile"] == reviewed


def test_finish_merges_into_checked_out_branch(git_repo: Path) -> None:
    ws = started(git_repo)
    reviewed = ws.merge_into_staging("a", work(ws, "a", {"a.txt": "a\n"}), "A")
    ws.finish(reviewed, merge_into="main")
    assert git(git_repo, "rev-parse", "main").strip() == reviewed  # fast-forward
    assert (git_repo / "a.txt").read_text(encoding="utf-8") == "a\n"
    assert git(git_repo, "status", "--porcelain") == ""


def test_finish_merge_into_refuses_dirty_or_conflicting_target(git_repo: Path) -> None:
    ws = started(git_repo)
    reviewed = ws.merge_into_staging("a", work(ws, "a", {"README.md": "# a\n"}), "A")
    (git_repo / "README.md").write_text("# local edit\n", encoding="utf-8")
    main = git(git_repo, "rev-parse", "main").strip()
    with pytest.raises(GitError, match="uncommitted changes"):
        ws.finish(reviewed, merge_into="main")
    assert git(git_repo, "rev-parse", "main").strip() == main
    assert (git_repo / "README.md").read_text(encoding="utf-8") == "# local edit\n"
    git(git_repo, "commit", "-q", "--no-gpg-sign", "-am", "user moves on")
    main = git(git_repo, "rev-parse", "main").strip()
    with pytest.raises(MergeConflictError, match="conflicts with main") as err:
        ws.finish(reviewed, merge_into="main")
    assert err.value.paths == ["README.md"]
    assert git(git_repo, "rev-parse", "main").strip() == main
    assert git(git_repo, "status", "--porcelain") == ""


def test_finish_merge_into_branch_not_checked_out(git_repo: Path) -> None:
    git(git_repo, "branch", "develop")
    (git_repo / "user.txt").write_text("u\n", encoding="utf-8")
    git(git_repo, "add", "user.txt")
    git(git_repo, "commit", "-q", "--no-gpg-sign", "-m", "user work on main")
    git(git_repo, "switch", "-q", "develop")
    git(git_repo, "switch", "-q", "-c", "other")
    ws = started(git_repo, run="r2")
    reviewed = ws.merge_into_staging("a", work(ws, "a", {"a.txt": "a\n"}), "A")
    main_before = git(git_repo, "rev-parse", "main").strip()
    ws.finish(reviewed, merge_into="main")
    main_after = git(git_repo, "rev-parse", "main").strip()
    assert parents(git_repo, main_after) == [main_before, reviewed]
    assert git(git_repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "other"
    assert not (git_repo / "a.txt").exists()


# cleanup -------------------------------------------------------------------------------------


@pytest.mark.slow
def test_cleanup_keeps_dirty_worktree_and_unmerged_branch(git_repo: Path) -> None:
    git(git_repo, "branch", "lo-user-branch")
    ws = started(git_repo)
    ws.merge_into_staging("done", work(ws, "done", {"d.txt": "d\n"}), "Done")
    ws.merge_into_staging("dirty", work(ws, "dirty", {"x.txt": "x\n"}), "Dirty")
    (ws.worktree_path("dirty") / "unsaved.txt").write_text("keep me\n", encoding="utf-8")
    work(ws, "unmerged", {"u.txt": "u\n"})
    ws.ensure_worktree("gone")
    for p in sorted(ws.worktree_path("gone").rglob("*"), reverse=True):
        p.unlink() if p.is_file() else p.rmdir()
    ws.worktree_path("gone").rmdir()  # deleted by hand: a stale record
    assert ws.worktrees.remove_worktree("dirty") is False
    report = ws.cleanup(["done", "dirty", "unmerged", "gone"])
    assert report.removed == ["done", "unmerged"]
    assert report.kept_dirty == ["dirty"]
    assert "unsaved.txt" in report.details["dirty"]
    assert (ws.worktree_path("dirty") / "unsaved.txt").read_text(encoding="utf-8") == "keep me\n"
    assert sorted(report.branches_deleted) == ["lo/r1/done", "lo/r1/gone"]
    assert sorted(report.branches_kept) == ["lo/r1/dirty", "lo/r1/unmerged"]
    assert "not merged" in report.details["lo/r1/unmerged"]
    left = branches(git_repo)
    assert {"lo/r1/dirty", "lo/r1/unmerged", "lo-user-branch", "main", "lo/r1/staging"} <= set(left)
    assert "lo/r1/done" not in left
    assert "gone" not in git(git_repo, "worktree", "list")
    assert "lo/r1/done" not in git(git_repo, "config", "--list")
    (ws.worktree_path("dirty") / "unsaved.txt").unlink()
    assert ws.worktrees.remove_worktree("dirty") is True
    assert ws.worktrees.remove_worktree("dirty") is True  # nothing left to remove


def test_cleanup_after_finish_deletes_staging_only_when_asked(git_repo: Path) -> None:
    ws = started(git_repo)
    reviewed = ws.merge_into_staging("a", work(ws, "a", {"a.txt": "a\n"}), "A")
    ws.finish(reviewed)
    report = ws.cleanup(["a"])
    assert report.branches_deleted == ["lo/r1/a"] and "lo/r1/staging" in branches(git_repo)
    report = ws.cleanup(["a"], delete_staging=True)
    assert report.branches_deleted == ["lo/r1/staging"]
    assert branches(git_repo)["feat/r1"] == reviewed
    assert not (git_repo / ".worktrees").exists()


def test_cleanup_keeps_untracked_and_foreign_owned(git_repo: Path) -> None:
    ws = started(git_repo)
    path = ws.ensure_worktree("a")
    (path / "new-untracked.txt").write_text("u\n", encoding="utf-8")
    assert dirty_paths(path) == ["new-untracked.txt"]
    other = started(git_repo, run="r2")
    assert other.ensure_worktree("a") != path  # one folder per run: never shared
    other.ensure_worktree("b")
    # a worktree at r1's place for b that r1 did not create: the user's, never removed
    git(git_repo, "worktree", "add", "-q", "-b", "mine", str(ws.worktree_path("b")))
    report = ws.cleanup(["a", "b"])
    assert report.kept_dirty == ["a", "b"] and path.exists()
    assert "was not created by run r1" in report.details["b"]
    assert ws.worktree_path("b").exists() and "mine" in branches(git_repo)
    assert "lo/r2/b" in branches(git_repo)  # another run's branch is not this cleanup's
    assert other.worktree_path("a").exists() and other.worktree_path("b").exists()


def test_detached_worktree_with_unreachable_commit_is_kept(git_repo: Path) -> None:
    ws = started(git_repo)
    path = ws.ensure_worktree("a")
    git(path, "switch", "-q", "--detach")
    agent_commit(path, "lost.txt", "l\n", "only here")
    assert ws.worktrees.remove_worktree("a") is False
    assert (path / "lost.txt").exists()
    assert path.is_dir()


def test_staging_never_receives_a_secret_file(git_repo: Path) -> None:
    ws = started(git_repo)
    path = ws.ensure_worktree("a")
    commit = agent_commit(path, "deploy.pem", "k\n", "agent commits a key, bypassing commit_task")
    staging = git(git_repo, "rev-parse", "lo/r1/staging")
    with pytest.raises(SecretFileError, match=r"deploy\.pem"):
        ws.merge_into_staging("a", commit, "A")
    assert git(git_repo, "rev-parse", "lo/r1/staging") == staging


@pytest.mark.slow
def test_parallel_clean_checkouts_do_not_trip_over_each_other(git_repo: Path) -> None:
    """Two tasks verified at once each take a clean checkout: `git worktree add` run
    concurrently in one repository failed ("failed to read .git/worktrees/tree1/commondir")
    in 4 of 48 checkouts without the gateway's worktree lock, and the private object view
    made by two threads at once failed ("could not set core.repositoryformatversion")."""
    import threading

    errors: list[str] = []

    def work() -> None:
        for _ in range(6):
            try:
                with tempcheckout.temp_checkout(git_repo, "HEAD") as tree:
                    assert (tree / "README.md").is_file()
            except Exception as exc:  # every failure is the finding
                errors.append(str(exc)[-200:])

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []


def test_the_worktree_at_a_path_is_found_through_symlinks_as_before(tmp_path: Path) -> None:
    """``worktree_in`` resolves only the worktrees that can be at the path (the same last
    name, or a symlinked last part) and finds exactly what resolving every one found."""
    from loop_orchestrator.git.parse import WorktreeInfo
    from loop_orchestrator.workspace.branches import worktree_in

    real = tmp_path / "real"
    (real / "t1").mkdir(parents=True)
    (real / "t2").mkdir()
    (tmp_path / "via").symlink_to(real)  # a symlinked folder on the way
    (tmp_path / "alias").symlink_to(real / "t2")  # a symlinked last part, another name

    def info(path: Path) -> WorktreeInfo:
        return WorktreeInfo(path, None, None, locked=False, prunable=False)

    listed = [info(tmp_path / "via" / "t1"), info(tmp_path / "alias"), info(real / "gone")]
    for path in (real / "t1", tmp_path / "via" / "t1", real / "t2", real / "t3"):
        naive = next((w for w in listed if w.path.resolve() == path.resolve()), None)
        assert worktree_in(listed, path) == naive
    assert worktree_in(listed, real / "t2") == listed[1]
    assert worktree_in(listed, real / "t1") == listed[0]
    assert worktree_in(listed, real / "gone") == listed[2]  # a stale entry, as git lists it
    assert worktree_in(listed, real / "t3") is None


@pytest.mark.parametrize("kind", ["both changed", "deleted by them"])
def test_a_worktree_left_in_a_conflicted_merge_is_not_committed(git_repo: Path, kind: str) -> None:
    """A session that left a merge with conflicts (both sides changed a file, or one
    deleted what the other changed) gets its worktree back as it was: nothing staged,
    committed or moved, and the reason named."""
    ws = started(git_repo)
    first = work(ws, "a", {"shared.txt": "one\n"})
    path = ws.worktree_path("a")
    git(path, "switch", "-q", "-c", "other", "HEAD~0")
    if kind == "both changed":
        (path / "shared.txt").write_text("theirs\n", encoding="utf-8")
        git(path, "commit", "-q", "--no-gpg-sign", "-am", "theirs")
    else:
        git(path, "rm", "-q", "shared.txt")
        git(path, "commit", "-q", "--no-gpg-sign", "-m", "gone")
    git(path, "switch", "-q", ws.task_branch("a"))
    (path / "shared.txt").write_text("ours\n", encoding="utf-8")
    git(path, "commit", "-q", "--no-gpg-sign", "-am", "ours")
    ours = git(path, "rev-parse", "HEAD").strip()
    merged = subprocess.run(
        ["git", "merge", "--no-edit", "other"], cwd=path, capture_output=True, check=False
    )
    assert merged.returncode != 0
    (path / "new.txt").write_text("more\n", encoding="utf-8")
    with pytest.raises(GitError, match="unresolved merge conflicts"):
        ws.commit_task("a", "task a")
    assert git(path, "rev-parse", "HEAD").strip() == ours != first
    assert (path / ".git").exists() and "new.txt" in git(path, "status", "--porcelain")
    assert git(path, "diff", "--cached", "--name-only").strip() in ("", "shared.txt")
