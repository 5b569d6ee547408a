"""Revisions and diffs on real repositories, and the parsers behind them."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from helpers.git import git

from loop_orchestrator.errors import GitError
from loop_orchestrator.git import gateway
from loop_orchestrator.git.checkouts import temp_checkout
from loop_orchestrator.git.gateway import (
    added_lines,
    batch_answers,
    changed_paths,
    diff_stat,
    diff_text,
    file_at,
    files_at,
    is_ancestor,
    list_files,
    rev_parse,
)
from loop_orchestrator.git.parse import Change, parse_added_lines, parse_worktrees, unquote_path
from loop_orchestrator.git.secretfiles import is_secret_path, scan_tree


def commit_all(repo: Path, message: str = "change") -> str:
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--no-gpg-sign", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def head(repo: Path) -> str:
    return git(repo, "rev-parse", "HEAD").strip()


def test_rename_shows_both_sides(git_repo: Path) -> None:
    (git_repo / "app" / "models.py").write_text("x = 1\n" * 20, encoding="utf-8")
    base = commit_all(git_repo)
    git(git_repo, "mv", "app/models.py", "app/renamed.py")
    # diff.renames in the user's config must not hide the deletion either.
    git(git_repo, "config", "diff.renames", "copies")
    commit = commit_all(git_repo)
    changes = changed_paths(git_repo, base, commit)
    assert sorted((c.status, c.path) for c in changes) == [
        ("A", "app/renamed.py"),
        ("D", "app/models.py"),
    ]


def test_mode_symlink_and_delete_changes(git_repo: Path) -> None:
    (git_repo / "run.sh").write_text("echo hi\n", encoding="utf-8")
    (git_repo / "link").write_text("plain file\n", encoding="utf-8")
    base = commit_all(git_repo)
    (git_repo / "run.sh").chmod(0o755)
    (git_repo / "link").unlink()
    (git_repo / "link").symlink_to("README.md")
    (git_repo / "app" / "__init__.py").unlink()
    commit = commit_all(git_repo)
    by_path = {c.path: c for c in changed_paths(git_repo, base, commit)}
    assert by_path["run.sh"] == Change("M", "run.sh", "100644", "100755")
    assert by_path["link"] == Change("T", "link", "100644", "120000")
    assert by_path["app/__init__.py"] == Change("D", "app/__init__.py", "100644", "000000")
    assert set(by_path) == {"run.sh", "link", "app/__init__.py"}


def test_added_lines_numbers_and_odd_names(git_repo: Path) -> None:
    (git_repo / "a.py").write_text("one\ntwo\nthree\nfour\n", encoding="utf-8")
    base = commit_all(git_repo)
    (git_repo / "a.py").write_text("zero\none\ntwo\nTHREE\nfour\n++ plus\n", encoding="utf-8")
    (git_repo / "with space.txt").write_text("hello\nworld", encoding="utf-8")
    (git_repo / "ünï\tcode.txt").write_text("x\n", encoding="utf-8")
    git(git_repo, "rm", "-q", "README.md")
    commit = commit_all(git_repo)
    lines = added_lines(git_repo, base, commit)
    assert lines["a.py"] == [(1, "zero"), (4, "THREE"), (6, "++ plus")]
    assert lines["with space.txt"] == [(1, "hello"), (2, "world")]
    assert lines["ünï\tcode.txt"] == [(1, "x")]
    assert "README.md" not in lines
    assert set(lines) == {"a.py", "with space.txt", "ünï\tcode.txt"}


def test_parse_added_lines_does_not_mistake_content_for_headers() -> None:
    patch = (
        "diff --git a/f b/f\n--- a/f\n+++ b/f\n@@ -1,2 +1,3 @@\n"
        "-old\n+++ not a header\n+--- nor this\n+@@ -1 +1 @@ nor this\n"
        "\\ No newline at end of file\n"
        'diff --git a/g b/g\n--- a/g\n+++ "b/q\\"uote"\n@@ -0,0 +7 @@\n+seven\n'
    )
    assert parse_added_lines(patch) == {
        "f": [(1, "++ not a header"), (2, "--- nor this"), (3, "@@ -1 +1 @@ nor this")],
        'q"uote': [(7, "seven")],
    }


def test_diff_text_limited_to_literal_paths(git_repo: Path) -> None:
    base = head(git_repo)
    (git_repo / "README.md").write_text("# changed\n", encoding="utf-8")
    (git_repo / "app" / "[x].py").write_text("y = 2\n", encoding="utf-8")
    (git_repo / "app" / "x.py").write_text("z = 3\n", encoding="utf-8")
    commit = commit_all(git_repo)
    full = diff_text(git_repo, base, commit)
    assert "+# changed" in full and "+y = 2" in full and "+z = 3" in full
    only = diff_text(git_repo, base, commit, ["app/[x].py"])
    assert "+y = 2" in only and "+z = 3" not in only and "README" not in only
    assert diff_text(git_repo, base, commit, []) == ""
    stat = diff_stat(git_repo, base, commit)
    assert "README.md" in stat and "3 files changed" in stat


def test_file_at(git_repo: Path) -> None:
    first = head(git_repo)
    (git_repo / "README.md").write_text("# second\n", encoding="utf-8")
    second = commit_all(git_repo)
    assert file_at(git_repo, first, "README.md") == "# sample\n"
    assert file_at(git_repo, second, "README.md") == "# second\n"
    assert file_at(git_repo, second, "missing.txt") is None
    assert file_at(git_repo, second, "app") is None  # a folder is not a file
    with pytest.raises(GitError, match="unknown revision 'nope'"):
        file_at(git_repo, "nope", "README.md")


def test_files_are_read_at_once_by_their_byte_counts_whatever_they_hold(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``files_at`` reads many (commit, path) in one ``git cat-file --batch``, split by the
    byte counts git gives, whatever the files hold (lines that look like the batch's own
    headers, CRLF and a last CR, invalid UTF-8, NUL bytes, nothing) or whatever they are
    (absent, a folder, a symlink, a name with spaces, a bad name); ``file_at`` is one of
    them."""
    first = head(git_repo)
    files: dict[str, bytes] = {
        "headers.txt": b"0123 blob 5\nabcde\nx missing\n",
        "crlf.txt": b"one\r\ntwo\r\n",
        "last-cr.txt": b"ends with a CR\r",
        "latin.txt": "caf\u00e9\n".encode("latin-1"),
        "nul.bin": b"\x00\x01\x02 blob 3\n",
        "empty.txt": b"",
        "with space/and more.txt": "\u00e9t\u00e9 \u2713\n".encode(),
        "README.md": b"# changed\n",
    }
    for rel, data in files.items():
        (git_repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (git_repo / rel).write_bytes(data)
    (git_repo / "link").symlink_to("README.md")
    second = commit_all(git_repo)
    # what each reads as: UTF-8 (an invalid byte replaced), line endings as Python's text
    # mode reads them, a last lone CR not kept (as file_at always read it)
    texts = {
        "headers.txt": "0123 blob 5\nabcde\nx missing\n",
        "crlf.txt": "one\ntwo\n",
        "last-cr.txt": "ends with a CR",
        "latin.txt": "caf\ufffd\n",
        "nul.bin": "\x00\x01\x02 blob 3\n",
        "empty.txt": "",
        "with space/and more.txt": "\u00e9t\u00e9 \u2713\n",
        "README.md": "# changed\n",
        "link": "README.md",
    }
    paths = [*texts, "app", "missing.txt", "../up", "", "a\nb", "with space/gone.txt"]
    wanted = [(rev, p) for p in paths for rev in (first, second)] + [("main", "README.md")]
    expected = {(second, p): texts.get(p) for p in paths} | {("main", "README.md"): "# changed\n"}
    expected |= {(first, p): "# sample\n" if p == "README.md" else None for p in paths}
    batches: list[tuple[str, ...]] = []
    real_git = gateway.git

    def counted(cwd: Path, *args: str, **kwargs: Any) -> Any:
        if "cat-file" in args:
            batches.append(args)
        return real_git(cwd, *args, **kwargs)

    monkeypatch.setattr(gateway, "git", counted)  # (git itself answers: only counted)
    got = files_at(git_repo, wanted)
    assert len(batches) == 1  # every file, one process
    assert got == expected and list(got) == wanted
    assert file_at(git_repo, second, "crlf.txt") == "one\ntwo\n" and len(batches) == 2
    assert files_at(git_repo, []) == {} and len(batches) == 2
    with pytest.raises(GitError, match="unknown revision 'nope'"):
        files_at(git_repo, [("nope", "README.md")])


def test_a_batch_is_read_by_its_byte_counts_and_only_as_far_as_it_parses() -> None:
    """``batch_answers`` takes each answer's content by its header's byte count (content
    that looks like headers included); it stops where the output ends or stops being
    what git writes, and the answers it did not read are not made up."""
    data = b"a1 blob 13\nb2 blob 3\nxy\n\nspec:path missing\nc3 tree 0\n\n"
    assert batch_answers(data, 3) == [(b"blob", b"b2 blob 3\nxy\n"), None, (b"tree", b"")]
    assert batch_answers(data, 2) == [(b"blob", b"b2 blob 3\nxy\n"), None]
    assert batch_answers(data[:20], 3) == []  # cut inside the first content
    assert batch_answers(b"a1 blob 3\nabcX", 1) == []  # no newline after the content
    assert batch_answers(b"garbage\n" + data, 3) == []
    assert batch_answers(b"", 1) == []


def test_each_repository_s_object_format_is_asked_of_git_once(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A SHA-256 repository and a SHA-1 one in one process each get their own format,
    and asking again starts no git."""
    wide = tmp_path / "wide"
    wide.mkdir()
    git(wide, "init", "-q", "--object-format=sha256", "-b", "main")
    asked: list[Path] = []
    real_git = gateway.git

    def counted(cwd: Path, *args: str, **kwargs: Any) -> Any:
        if "--show-object-format" in args:
            asked.append(cwd)
        return real_git(cwd, *args, **kwargs)

    monkeypatch.setattr(gateway, "git", counted)
    assert gateway.object_format(wide) == "sha256"
    assert gateway.object_format(git_repo) == "sha1"
    assert gateway.object_format(wide) == "sha256"
    assert gateway.object_format(git_repo) == "sha1"
    assert asked == [wide, git_repo]


def test_rev_parse_and_is_ancestor(git_repo: Path) -> None:
    first = head(git_repo)
    assert rev_parse(git_repo, "main") == first
    assert len(first) == 40
    (git_repo / "f").write_text("f\n", encoding="utf-8")
    second = commit_all(git_repo)
    git(git_repo, "tag", "-a", "-m", "t", "v1", second)
    assert rev_parse(git_repo, "v1") == second  # annotated tag peeled to its commit
    assert is_ancestor(git_repo, first, second)
    assert is_ancestor(git_repo, second, second)
    assert not is_ancestor(git_repo, second, first)
    with pytest.raises(GitError, match="unknown revision 'no-such-branch'"):
        rev_parse(git_repo, "no-such-branch")
    with pytest.raises(GitError, match="invalid revision"):
        rev_parse(git_repo, "--all")
    with pytest.raises(GitError):
        is_ancestor(git_repo, "no-such-branch", first)


def test_several_revisions_are_resolved_by_one_git_as_each_alone(
    git_repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    first = head(git_repo)
    (git_repo / "f").write_text("f\n", encoding="utf-8")
    second = commit_all(git_repo)
    git(git_repo, "tag", "-a", "-m", "t", "v1", second)
    asked: list[tuple[str, ...]] = []
    real_git = gateway.git

    def counted(cwd: Path, *args: str, **kwargs: Any) -> Any:
        asked.append(args)
        return real_git(cwd, *args, **kwargs)

    monkeypatch.setattr(gateway, "git", counted)
    assert gateway.rev_parse_all(git_repo, [first, "v1", "main~1"]) == [first, second, first]
    assert len(asked) == 1
    # anything that is not one commit each is refused by name, as rev_parse refuses it
    for wrong, why in [
        ("no-such-branch", "unknown revision 'no-such-branch'"),
        ("main^{tree}", "unknown revision"),
        ("main~1..main", "unknown revision"),
        ("--all", "invalid revision"),
    ]:
        with pytest.raises(GitError, match=re.escape(why)):
            gateway.rev_parse_all(git_repo, ["main", wrong])


@pytest.mark.parametrize(
    ("path", "secret"),
    [
        (".env", True),
        (".env.local", True),
        ("config/.ENV.production", True),
        ("certs/server.pem", True),
        ("aws_credentials.json", True),
        ("id_rsa", True),
        ("home/.ssh/id_rsa.pub", True),
        ("tls.key", True),
        (".env/lib/site.py", True),
        ("README.md", False),
        ("src/keyboard.py", False),
        ("environment.py", False),
        ("docs/key.md", False),
        ("app/.envy/x", True),
        ("pem.txt", False),
    ],
)
def test_secret_patterns(path: str, secret: bool) -> None:
    assert is_secret_path(path) is secret


def test_scan_tree_finds_secrets_and_nested_repos(tmp_path: Path) -> None:
    (tmp_path / "a" / "b").mkdir(parents=True)
    (tmp_path / "a" / "b" / "id_rsa").write_text("k", encoding="utf-8")
    (tmp_path / "ok.txt").write_text("k", encoding="utf-8")
    (tmp_path / "inner" / ".git").mkdir(parents=True)
    (tmp_path / "inner" / ".env").write_text("k", encoding="utf-8")  # not ours to scan
    (tmp_path / ".env").mkdir()
    (tmp_path / ".env" / "bin").mkdir()
    assert scan_tree(tmp_path) == ([".env/", "a/b/id_rsa"], ["inner"])


def test_unquote_and_worktree_parsing() -> None:
    assert unquote_path("plain name") == "plain name"
    assert unquote_path('"a\\tb\\\\c\\"d"') == 'a\tb\\c"d'
    assert unquote_path('"\\303\\274"') == "ü"
    text = (
        "worktree /r\0HEAD abc\0branch refs/heads/main\0\0"
        "worktree /r/.worktrees/a\0HEAD def\0detached\0locked why\0\0"
    )
    main, wt = parse_worktrees(text)
    assert (main.path, main.branch, main.locked) == (Path("/r"), "main", False)
    assert (wt.path, wt.branch, wt.head, wt.locked) == (Path("/r/.worktrees/a"), None, "def", True)


def test_list_files(git_repo: Path) -> None:
    first = head(git_repo)
    (git_repo / "deep" / "er").mkdir(parents=True)
    (git_repo / "deep" / "er" / "x y.txt").write_text("x\n", encoding="utf-8")
    (git_repo / "link").symlink_to("README.md")
    second = commit_all(git_repo)
    assert list_files(git_repo, first) == ["README.md", "app/__init__.py"]
    assert sorted(list_files(git_repo, second)) == [
        "README.md",
        "app/__init__.py",
        "deep/er/x y.txt",
        "link",
    ]


def test_temp_checkout_is_clean_and_gone_afterwards(git_repo: Path) -> None:
    first = head(git_repo)
    (git_repo / "README.md").write_text("# second\n", encoding="utf-8")
    commit_all(git_repo)
    (git_repo / "README.md").write_text("# uncommitted\n", encoding="utf-8")
    with temp_checkout(git_repo, first) as tree:
        assert (tree / "README.md").read_text(encoding="utf-8") == "# sample\n"
        assert git(tree, "rev-parse", "HEAD").strip() == first
        (tree / "build-output.txt").write_text("made by a check\n", encoding="utf-8")
        # a worktree of lo-orch's private object view: the user's repository never lists it
        assert str(tree) not in git(git_repo, "worktree", "list")
        assert git(tree, "status", "--porcelain").strip() == "?? build-output.txt"
    assert not tree.exists()
    assert len(git(git_repo, "worktree", "list").splitlines()) == 1
    assert (git_repo / "README.md").read_text(encoding="utf-8") == "# uncommitted\n"


def test_leaked_git_variables_do_not_redirect(
    git_repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()
    git(other, "init", "-q")
    (other / "README.md").write_text("# other\n", encoding="utf-8")
    git(other, "add", "-A")
    git(other, "commit", "-q", "--no-gpg-sign", "-m", "other")
    first = head(git_repo)
    # As inside a git hook: GIT_DIR/GIT_INDEX_FILE point at another repository.
    monkeypatch.setenv("GIT_DIR", str(other / ".git"))
    monkeypatch.setenv("GIT_INDEX_FILE", str(other / ".git" / "index"))
    assert rev_parse(git_repo, "HEAD") == first
    assert file_at(git_repo, first, "README.md") == "# sample\n"
    assert list_files(git_repo, first) == ["README.md", "app/__init__.py"]
