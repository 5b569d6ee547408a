"""A sandboxed session's own object store: what it adds to git, checked before it is kept.

The repository's object store is read-only in the sandbox: a writable one lets a session
replace an object that is already there (staging's tree, say) with other content under the
same name, and git does not hash an object again when it reads it, so a verified commit
would hold files nobody verified. The session writes its objects into a store of its own,
a folder in the supervisor's private state bound over ``.git/objects`` in its sandbox,
whose alternate is the repository's store bound read-only elsewhere (no variable the
session could drop: its git finds both where git always looks). The supervisor takes its
objects (``take``) before it reads the task's branch or index: each loose object is hashed
again while it is copied and kept only under the name its content has; a pack is checked
by ``git index-pack`` (which also refuses an object that differs from one the repository
holds). What was taken is removed from the session's store: the session reads it through
its alternate from then on.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import os
import re
import secrets
import shutil
import tempfile
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from loop_orchestrator.files import NOFOLLOW_DIR, open_regular
from loop_orchestrator.git.gateway import git, object_format

log = logging.getLogger(__name__)

_HEX = re.compile(r"^[0-9a-f]+\Z")
_TYPES = (b"blob", b"tree", b"commit", b"tag")
_CHUNK = 1 << 16


def take(repo: Path, common: Path, store: Path) -> int:
    """Copy what the session added in ``store`` into ``common``'s object store, checked;
    the number of objects taken (packs count one each).

    The session may change its store while this runs: every folder in it is opened once,
    without following a symlink, and every file is read, and removed, through the folder
    it was found in (a folder swapped for a symlink to the repository's own objects
    cannot make this remove those)."""
    try:
        root = os.open(store, NOFOLLOW_DIR)
    except OSError:
        return 0
    try:
        algo = object_format(repo)
        width = hashlib.new(algo).digest_size * 2
        taken = 0
        for sub in _names(root):
            if len(sub) != 2 or not _HEX.match(sub):
                continue
            with _subdir(root, sub) as folder:
                if folder is None:
                    continue
                for entry in _names(folder):
                    name = sub + entry
                    if len(name) == width and _HEX.match(entry):
                        taken += _take_loose(folder, entry, common / "objects", name, algo)
        with _subdir(root, "pack") as folder:
            if folder is not None:
                for entry in _names(folder):
                    if entry.endswith(".pack"):
                        taken += _take_pack(
                            repo, common / "objects" / "pack", folder, entry, store.parent
                        )
    finally:
        os.close(root)
    if taken:
        log.info("session objects taken", extra={"count": taken, "store": str(store)})
    return taken


def _names(folder: int) -> list[str]:
    try:
        return sorted(os.listdir(folder))
    except OSError:
        return []


@contextlib.contextmanager
def _subdir(parent: int, name: str) -> Iterator[int | None]:
    """The folder ``name`` in ``parent`` opened (None: not a folder, or a symlink)."""
    try:
        fd = os.open(name, NOFOLLOW_DIR, dir_fd=parent)
    except OSError:
        yield None
        return
    try:
        yield fd
    finally:
        os.close(fd)


def _unlink(folder: int, name: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(name, dir_fd=folder)


def _take_loose(folder: int, entry: str, objects: Path, name: str, algo: str) -> int:
    """Copy one loose object if its content hashes to ``name``; remove it from the store."""
    final = objects / name[:2] / name[2:]
    if final.exists():
        _unlink(folder, entry)
        return 0
    fd = open_regular(entry, dir_fd=folder)
    if fd is None:
        return 0
    final.parent.mkdir(exist_ok=True)
    tmp = final.parent / f"tmp_obj_{secrets.token_hex(8)}"
    ok = False
    try:
        with os.fdopen(fd, "rb") as src, tmp.open("xb") as dst:
            ok = _copy_hashed(src, dst, name, algo)
        if ok:
            with contextlib.suppress(FileExistsError):
                os.link(tmp, final)
    finally:
        tmp.unlink(missing_ok=True)
    if not ok:
        log.warning("session object refused", extra={"object": name})
        return 0
    _unlink(folder, entry)
    return 1


def _copy_hashed(src: BinaryIO, dst: BinaryIO, name: str, algo: str) -> bool:
    """Copy a loose object's bytes from ``src`` to ``dst`` (read once) and say whether the
    content is an object whose hash is ``name`` (inflated a chunk at a time)."""
    try:
        return _copy_hashed_raw(src, dst, name, algo)
    except zlib.error:
        return False


def _copy_hashed_raw(src: BinaryIO, dst: BinaryIO, name: str, algo: str) -> bool:
    read, write = src.read, dst.write
    inflate = zlib.decompressobj()
    digest = hashlib.new(algo)
    header = b""
    expected: int | None = None
    seen = 0
    while True:
        chunk = read(_CHUNK)
        if not chunk:
            break
        write(chunk)
        data = inflate.decompress(chunk, _CHUNK)
        while True:
            if expected is None:
                header += data
                if b"\0" not in header:
                    if len(header) > 64:
                        return False
                else:
                    head, _, rest = header.partition(b"\0")
                    kind, _, size = head.partition(b" ")
                    if kind not in _TYPES or not size.isdigit():
                        return False
                    expected = int(size)
                    digest.update(head + b"\0")
                    digest.update(rest)
                    seen = len(rest)
            else:
                digest.update(data)
                seen += len(data)
            if expected is not None and seen > expected:
                return False
            if not inflate.unconsumed_tail:
                break
            data = inflate.decompress(inflate.unconsumed_tail, _CHUNK)
    return inflate.eof and expected == seen and digest.hexdigest() == name


def _take_pack(repo: Path, pack_dir: Path, folder: int, entry: str, private: Path) -> int:
    """Check a pack with ``git index-pack`` on a copy in ``private`` (out of the session's
    reach: it cannot swap the pack after the check), then keep that copy; remove the pack
    from the store."""
    fd = open_regular(entry, dir_fd=folder)
    if fd is None:
        return 0
    with tempfile.TemporaryDirectory(prefix="pack-", dir=private) as tmpdir:
        copy = Path(tmpdir) / "incoming.pack"
        with os.fdopen(fd, "rb") as src, copy.open("xb") as dst:
            shutil.copyfileobj(src, dst)
        res = git(repo, "index-pack", str(copy), check=False)
        checksum = res.stdout.strip().split()[-1] if res.ok and res.stdout.strip() else ""
        if not res.ok or not _HEX.match(checksum):
            log.warning("session pack refused", extra={"pack": entry, "error": res.stderr.strip()})
            return 0
        pack_dir.mkdir(parents=True, exist_ok=True)
        for suffix in (".pack", ".idx"):  # the index last: git looks for packs by it
            tmp = pack_dir / f"tmp_pack_import_{secrets.token_hex(8)}"
            shutil.copyfile(copy.with_suffix(suffix), tmp)
            tmp.replace(pack_dir / f"pack-{checksum}{suffix}")
    stem = entry[: -len(".pack")]
    for suffix in (".pack", ".idx", ".rev", ".bitmap", ".keep"):
        _unlink(folder, stem + suffix)
    return 1
