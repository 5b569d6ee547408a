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
import stat
import tempfile
import zlib
from pathlib import Path
from typing import BinaryIO

from loop_orchestrator.git.gateway import git

log = logging.getLogger(__name__)

_HEX = re.compile(r"^[0-9a-f]+\Z")
_TYPES = (b"blob", b"tree", b"commit", b"tag")
_CHUNK = 1 << 16


def take(repo: Path, common: Path, store: Path) -> int:
    """Copy what the session added in ``store`` into ``common``'s object store, checked;
    the number of objects taken (packs count one each)."""
    try:
        folder = os.open(store, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except OSError:
        return 0
    os.close(folder)
    algo = git(repo, "rev-parse", "--show-object-format").stdout.strip() or "sha1"
    width = hashlib.new(algo).digest_size * 2
    taken = 0
    for sub in _entries(store, dirs=True):
        if len(sub.name) != 2 or not _HEX.match(sub.name):
            continue
        for entry in _entries(Path(sub.path), dirs=False):
            name = sub.name + entry.name
            if len(name) == width and _HEX.match(entry.name):
                taken += _take_loose(Path(entry.path), common / "objects", name, algo)
    for entry in _entries(store / "pack", dirs=False):
        if entry.name.endswith(".pack"):
            taken += _take_pack(repo, common / "objects" / "pack", Path(entry.path))
    if taken:
        log.info("session objects taken", extra={"count": taken, "store": str(store)})
    return taken


def _entries(folder: Path, *, dirs: bool) -> list[os.DirEntry[str]]:
    try:
        with os.scandir(folder) as it:
            found = list(it)
    except OSError:
        return []
    if dirs:
        return [e for e in found if e.is_dir(follow_symlinks=False)]
    return [e for e in found if e.is_file(follow_symlinks=False)]


def _open_plain(path: Path) -> int | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        return None
    return fd


def _take_loose(path: Path, objects: Path, name: str, algo: str) -> int:
    """Copy one loose object if its content hashes to ``name``; remove it from the store."""
    final = objects / name[:2] / name[2:]
    if final.exists():
        path.unlink(missing_ok=True)
        return 0
    fd = _open_plain(path)
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
        log.warning("session object refused", extra={"object": name, "path": str(path)})
        return 0
    path.unlink(missing_ok=True)
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


def _take_pack(repo: Path, pack_dir: Path, path: Path) -> int:
    """Check a pack with ``git index-pack`` on a private copy, then keep it; remove it from
    the store."""
    fd = _open_plain(path)
    if fd is None:
        return 0
    with tempfile.TemporaryDirectory(prefix="lo-orch-pack-") as tmpdir:
        copy = Path(tmpdir) / "incoming.pack"
        with os.fdopen(fd, "rb") as src, copy.open("xb") as dst:
            shutil.copyfileobj(src, dst)
        res = git(repo, "index-pack", str(copy), check=False)
        checksum = res.stdout.strip().split()[-1] if res.ok and res.stdout.strip() else ""
        if not res.ok or not _HEX.match(checksum):
            log.warning(
                "session pack refused", extra={"path": str(path), "error": res.stderr.strip()}
            )
            return 0
        pack_dir.mkdir(parents=True, exist_ok=True)
        for suffix in (".pack", ".idx"):  # the index last: git looks for packs by it
            tmp = pack_dir / f"tmp_pack_import_{secrets.token_hex(8)}"
            shutil.copyfile(copy.with_suffix(suffix), tmp)
            tmp.replace(pack_dir / f"pack-{checksum}{suffix}")
    for suffix in (".pack", ".idx", ".rev", ".bitmap", ".keep"):
        path.with_suffix(suffix).unlink(missing_ok=True)
    return 1
