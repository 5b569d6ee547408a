"""Taking a session's own objects into the repository: only under the name their content
hashes to, never over an object the repository holds (real git stores, no sandbox)."""

from __future__ import annotations

import os
import subprocess
import zlib
from pathlib import Path

from helpers.git import git, init_repo

from loop_orchestrator.workspace import ownobjects


def store_of(tmp_path: Path) -> Path:
    """A session's object store as its git writes it (a bare repository's objects)."""
    bare = tmp_path / "session.git"
    subprocess.run(["git", "init", "-q", "--bare", str(bare)], check=True)
    return bare / "objects"


def write_object(store: Path, data: bytes) -> str:
    out = subprocess.run(
        ["git", "hash-object", "-w", "--stdin"],
        input=data,
        capture_output=True,
        check=True,
        env={**os.environ, "GIT_OBJECT_DIRECTORY": str(store)},
    )
    return out.stdout.decode().strip()


def loose(store: Path, name: str) -> Path:
    return store / name[:2] / name[2:]


def has(repo: Path, name: str) -> bool:
    return subprocess.run(["git", "cat-file", "-e", name], cwd=repo).returncode == 0


def test_a_large_object_is_taken_and_leaves_the_store(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    store = store_of(tmp_path)
    data = os.urandom(300_000) + b"x" * 700_000  # many chunks, compressed and not
    name = write_object(store, data)

    assert ownobjects.take(repo, repo / ".git", store) == 1

    blob = subprocess.run(["git", "cat-file", "blob", name], cwd=repo, capture_output=True)
    assert blob.stdout == data
    assert not loose(store, name).exists()
    assert git(repo, "fsck", "--full", "--no-dangling") == ""


def test_content_under_another_name_is_refused(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    store = store_of(tmp_path)
    real = write_object(store, b"the work\n")
    other = write_object(store, b"something else\n")
    fake = "ab" * 20
    loose(store, fake).parent.mkdir(exist_ok=True)
    loose(store, fake).write_bytes(loose(store, other).read_bytes())

    assert ownobjects.take(repo, repo / ".git", store) == 2  # real and other

    assert has(repo, real) and has(repo, other) and not has(repo, fake)
    assert loose(store, fake).exists()  # refused, left where the session put it


def test_an_object_the_repository_holds_is_never_replaced(tmp_path: Path) -> None:
    repo = init_repo(tmp_path / "repo")
    readme = git(repo, "rev-parse", "HEAD:README.md").strip()
    before = loose(repo / ".git" / "objects", readme).read_bytes()
    store = store_of(tmp_path)
    forged = write_object(store, b"forged\n")
    loose(store, readme).parent.mkdir(exist_ok=True)
    loose(store, readme).write_bytes(loose(store, forged).read_bytes())

    ownobjects.take(repo, repo / ".git", store)

    assert loose(repo / ".git" / "objects", readme).read_bytes() == before
    assert git(repo, "show", "HEAD:README.md") == "# sample\n"


def test_an_object_that_inflates_past_its_size_is_refused_early(tmp_path: Path) -> None:
    """A header that says 10 bytes over a stream that inflates to 8 MiB (a zlib bomb):
    refused, inflated a chunk at a time."""
    repo = init_repo(tmp_path / "repo")
    store = store_of(tmp_path)
    name = "cd" * 20
    loose(store, name).parent.mkdir(exist_ok=True)
    loose(store, name).write_bytes(zlib.compress(b"blob 10\0" + b"\0" * (8 << 20)))

    assert ownobjects.take(repo, repo / ".git", store) == 0
    assert not has(repo, name)


def test_a_symlink_or_a_fifo_in_the_store_is_not_read(tmp_path: Path) -> None:
    """A FIFO under an object's name would block the supervisor's read for ever."""
    repo = init_repo(tmp_path / "repo")
    store = store_of(tmp_path)
    target = write_object(store, b"elsewhere\n")
    for name, make in (
        ("ef" * 20, lambda p: p.symlink_to(loose(store, target))),
        ("0a" * 20, lambda p: os.mkfifo(p)),
    ):
        loose(store, name).parent.mkdir(exist_ok=True)
        make(loose(store, name))

    assert ownobjects.take(repo, repo / ".git", store) == 1  # the real one only
    assert has(repo, target)
