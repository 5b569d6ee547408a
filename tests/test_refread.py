"""The values of named refs read in process (``git/refread.py``) are what ``git
for-each-ref`` gives, on real repositories: loose, packed, both, absent, dangling; and a ref
the module does not read as git does (a symbolic ref, text after the name, a symlink, a
folder, an odd name, reftable) is asked of git, so a session that writes a ref file by
hand cannot make lo-orch see another value than git's.
"""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from helpers.git import commit, git, init_repo

from loop_orchestrator.errors import GitError, RefMovedError
from loop_orchestrator.git import refread
from loop_orchestrator.git.refread import NotPlain, parse_loose, read_loose, update_ref

SHA = "a" * 40
NAMES = [
    "refs/heads/lo/r/staging",
    "refs/heads/lo/r/a",
    "refs/heads/lo/r/b-2",
    "refs/heads/feat/r",
    "refs/heads/lo/r/none",  # never made
    "refs/lo-orch/quarantine/r/heads/lo/r/staging/20261201T1Z",
]


def by_git(repo: Path, names: list[str] = NAMES) -> dict[str, str]:
    """Each of ``names`` git has, with its value, as ``for-each-ref`` lists it."""
    out = git(repo, "for-each-ref", "--format=%(refname) %(objectname)", "refs/")
    listed = dict(line.split(" ") for line in out.splitlines())
    return {name: listed[name] for name in names if name in listed}


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    r = init_repo(tmp_path / "repo")
    for name in NAMES[:4]:
        git(r, "update-ref", name, "HEAD")
    git(r, "update-ref", NAMES[5], "HEAD")
    return r


def test_a_loose_ref_is_an_object_name_and_a_newline_and_nothing_else() -> None:
    assert parse_loose(f"{SHA}\n".encode()) == SHA
    assert parse_loose(("b" * 64 + "\n").encode()) == "b" * 64  # a SHA-256 repository
    for odd in (SHA, f"{SHA} junk\n", f"{SHA}\n\n", "ref: refs/heads/main\n", f"{SHA[:-1]}\n"):
        assert parse_loose(odd.encode()) is None, odd
    assert parse_loose(f"{SHA.upper()}\n".encode()) is None


def test_loose_refs_are_read_in_process_as_git_lists_them(repo: Path) -> None:
    common = repo / ".git"
    for name in NAMES[:4]:
        assert read_loose(common, name) == by_git(repo)[name]
    assert refread.values(repo, NAMES) == by_git(repo)
    assert refread.value(repo, "refs/heads/lo/r/none") is None
    assert refread.values(repo, []) == {}


def test_packed_absent_and_dangling_refs_are_asked_of_git_and_agree(repo: Path) -> None:
    git(repo, "pack-refs", "--all")
    with pytest.raises(NotPlain):
        read_loose(repo / ".git", "refs/heads/lo/r/a")  # packed: no loose file
    assert refread.values(repo, NAMES) == by_git(repo)
    newer = commit(repo, {"f.txt": "1\n"})
    git(repo, "update-ref", "refs/heads/lo/r/a", newer)  # loose again, over its packed line
    git(repo, "update-ref", "-d", "refs/heads/lo/r/b-2")  # gone from packed-refs
    assert refread.values(repo, NAMES) == by_git(repo)
    assert refread.value(repo, "refs/heads/lo/r/a") == newer
    (repo / ".git/refs/heads/dangling").write_text(f"{'1' * 40}\n")  # no such object
    assert refread.values(repo, ["refs/heads/dangling"]) == {"refs/heads/dangling": "1" * 40}
    assert by_git(repo, ["refs/heads/dangling"]) == {"refs/heads/dangling": "1" * 40}


def test_random_moves_read_as_git_lists_them_after_each(repo: Path) -> None:
    rnd = random.Random(30)
    shas = [git(repo, "rev-parse", "HEAD").strip()]
    shas += [commit(repo, {f"f{i}.txt": f"{i}\n"}, f"c{i}") for i in range(3)]
    for step in range(40):
        op = rnd.random()
        name = rnd.choice(NAMES)
        if op < 0.5:
            git(repo, "update-ref", name, rnd.choice(shas))
        elif op < 0.75:
            git(repo, "update-ref", "-d", name)
        else:
            git(repo, "pack-refs", "--all" if op < 0.9 else "--no-prune")
        assert refread.values(repo, NAMES) == by_git(repo), step


ODD = {
    "a symbolic ref": "refs/heads/lo/r/staging",
    "text after the name": "refs/heads/lo/r/staging",
    "a symlink for a ref": "refs/heads/lo/r/a",
    "a folder where the ref would be": "refs/heads/lo/r/none",
    "a name with a character git allows": "refs/heads/lo/r/a@b",
}


def make_odd(repo: Path, case: str) -> None:
    """Make the refs of ``repo`` something this module does not read itself."""
    heads = repo / ".git/refs/heads"
    head = git(repo, "rev-parse", "HEAD").strip()
    other = commit(repo, {"other.txt": "1\n"})
    if case == "a symbolic ref":
        (heads / "lo/r/staging").unlink()
        git(repo, "symbolic-ref", "refs/heads/lo/r/staging", "refs/heads/main")
    elif case == "text after the name":  # (git takes the name and ignores the rest)
        (heads / "lo/r/staging").write_text(f"{other}\n{head}\n")
    elif case == "a symlink for a ref":
        (heads / "lo/r/a").unlink()
        (heads / "lo/r/a").symlink_to(heads / "main")
    elif case == "a folder where the ref would be":
        git(repo, "update-ref", "refs/heads/lo/r/none/x", head)
    else:
        git(repo, "update-ref", "refs/heads/lo/r/a@b", head)


@pytest.mark.parametrize("case", list(ODD))
def test_refs_not_read_here_are_asked_of_git_and_agree(
    repo: Path, case: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    make_odd(repo, case)
    with pytest.raises(NotPlain):
        read_loose(repo / ".git", ODD[case])
    asked = spy_git(monkeypatch)
    names = [*NAMES, ODD[case]]
    assert refread.values(repo, names) == by_git(repo, names)
    assert asked == [sorted(set(names))]


def spy_git(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """The names each ``for_each_ref`` (the real git) is asked for from now on."""
    asked: list[list[str]] = []
    real = refread.for_each_ref

    def counted(repo: Path, patterns: list[str]) -> dict[str, str]:
        asked.append(list(patterns))
        return real(repo, patterns)

    monkeypatch.setattr(refread, "for_each_ref", counted)
    return asked


def test_plain_loose_refs_ask_git_nothing_and_a_reftable_asks_git(
    repo: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    asked = spy_git(monkeypatch)
    present = NAMES[:4]
    assert refread.values(repo, present) == by_git(repo, present)
    assert asked == []
    (repo / ".git/reftable").mkdir()  # (git 2.39 knows no reftable: it reads the files)
    assert refread.values(repo, present) == by_git(repo, present)
    assert asked == [sorted(present)]


def test_a_symlinked_folder_on_the_way_is_followed_as_git_follows_it(repo: Path) -> None:
    heads = repo / ".git/refs/heads"
    (heads / "lo/s").symlink_to(heads / "lo/r")
    names = ["refs/heads/lo/s/a", "refs/heads/lo/r/a"]
    assert refread.values(repo, names) == by_git(repo, names)


def test_a_hand_written_staging_with_the_recorded_value_second_reads_as_git_reads_it(
    repo: Path,
) -> None:
    """A session that writes staging's file as another commit followed by the recorded
    value is not seen at the recorded value: git is asked, and git reads the first."""
    staging = repo / ".git/refs/heads/lo/r/staging"
    recorded = staging.read_text().strip()
    made_up = commit(repo, {"evil.txt": "1\n"})
    staging.write_text(f"{made_up}\n{recorded}\n")
    assert refread.value(repo, "refs/heads/lo/r/staging") == made_up
    assert by_git(repo)["refs/heads/lo/r/staging"] == made_up


def test_refs_git_cannot_read_fail_as_git_fails(repo: Path) -> None:
    git(repo, "pack-refs", "--all")
    (repo / ".git/packed-refs").write_text("junk\n")
    with pytest.raises(GitError, match="packed-refs"):
        refread.values(repo, NAMES)


def test_a_ref_moved_through_the_gateway_is_read_back_as_git_has_it_loose_or_packed(
    repo: Path,
) -> None:
    """``update_ref`` reads its ref back in process: made, moved after ``git
    pack-refs`` (git writes a loose file over the packed line) and deleted after it (only
    the packed line was left): each time what git has, and a move from a value the ref no
    longer has changes nothing and says so."""
    first = git(repo, "rev-parse", "HEAD").strip()
    second = commit(repo, {"second.txt": "2\n"})
    update_ref(repo, "lo/r/made", first, None, "made")
    assert by_git(repo, ["refs/heads/lo/r/made"]) == {"refs/heads/lo/r/made": first}
    git(repo, "pack-refs", "--all")
    update_ref(repo, "lo/r/made", second, first, "moved")  # (packed before: a loose file now)
    assert by_git(repo, ["refs/heads/lo/r/made"]) == {"refs/heads/lo/r/made": second}
    git(repo, "pack-refs", "--all")  # (packed only: the value is read from git)
    with pytest.raises(RefMovedError, match=f"expected {first[:12]}, found {second[:12]}"):
        update_ref(repo, "lo/r/made", first, first, "a stale writer")
    assert by_git(repo, ["refs/heads/lo/r/made"]) == {"refs/heads/lo/r/made": second}
    update_ref(repo, "lo/r/made", None, second, "deleted")  # (packed only: gone from packed-refs)
    assert by_git(repo, ["refs/heads/lo/r/made"]) == {}
    with pytest.raises(RefMovedError):
        update_ref(repo, "lo/r/made", None, second, "deleted twice")
