"""A remote session's transcript kept on the supervisor's machine (cluster/transcripts.py):
the node's ``Tail`` sends what was added, the supervisor's ``keep`` puts it in its copy."""

from __future__ import annotations

import os
from pathlib import Path

from loop_orchestrator.cluster import transcripts
from loop_orchestrator.cluster.node import read_regular


def _follow(tail: transcripts.Tail, copy: Path) -> None:
    delta = tail.delta()
    if delta is not None:
        assert transcripts.keep(copy, delta)


def test_the_copy_follows_appends_with_only_what_was_added(tmp_path: Path) -> None:
    node, copy = tmp_path / "node.jsonl", tmp_path / "home" / "projects" / "x" / "s.jsonl"
    tail = transcripts.Tail(node, read_regular)
    assert tail.delta() is None  # no file yet
    node.write_bytes(b'{"a": 1}\n')
    first = tail.delta()
    assert first == {"offset": 0, "data": b'{"a": 1}\n'}
    assert transcripts.keep(copy, first)
    assert tail.delta() is None  # nothing new
    with node.open("ab") as fh:
        fh.write(b'{"b": 2}\n')
    second = tail.delta()
    assert second == {"offset": 9, "data": b'{"b": 2}\n'}  # only the new line travels
    assert transcripts.keep(copy, second)
    assert copy.read_bytes() == node.read_bytes()


def test_a_transcript_the_session_rewrites_is_sent_whole_and_the_copy_shrinks(
    tmp_path: Path,
) -> None:
    """A session that empties or edits its transcript to look cheaper: the copy is the
    node's file byte for byte (spend.py sees the shrink and keeps its own book)."""
    node, copy = tmp_path / "node.jsonl", tmp_path / "copy.jsonl"
    tail = transcripts.Tail(node, read_regular)
    node.write_bytes(b'{"usage": 900}\n{"usage": 800}\n')
    _follow(tail, copy)
    node.write_bytes(b'{"usage": 1}\n')  # shorter
    _follow(tail, copy)
    assert copy.read_bytes() == b'{"usage": 1}\n'
    node.write_bytes(b'{"usage": 2}\n{"usage": 3}\n{"usage": 4}\n')  # longer, other start
    delta = tail.delta()
    assert delta is not None and delta["offset"] == 0
    assert transcripts.keep(copy, delta)
    assert copy.read_bytes() == node.read_bytes()


def test_a_delta_that_does_not_follow_on_is_refused(tmp_path: Path) -> None:
    copy = tmp_path / "copy.jsonl"
    copy.write_bytes(b"0123456789")
    assert not transcripts.keep(copy, {"offset": 4, "data": b"xx"})  # a gap or an overlap
    assert not transcripts.keep(copy, {"offset": -1, "data": b"xx"})
    assert not transcripts.keep(copy, {"offset": 10, "data": "not bytes"})
    assert copy.read_bytes() == b"0123456789"  # untouched
    assert not transcripts.keep(tmp_path / "missing.jsonl", {"offset": 3, "data": b"x"})
    assert transcripts.keep(copy, {"offset": 10, "data": b"ab"})
    assert copy.read_bytes() == b"0123456789ab"


def test_a_relaunch_starts_from_the_copy_it_was_given(tmp_path: Path) -> None:
    """The new node's file begins with the copy: only what the resumed session adds comes
    back."""
    node = tmp_path / "node.jsonl"
    node.write_bytes(b"old\n")
    tail = transcripts.Tail(node, read_regular, have=b"old\n")
    assert tail.delta() is None
    with node.open("ab") as fh:
        fh.write(b"new\n")
    assert tail.delta() == {"offset": 4, "data": b"new\n"}


def test_a_transcript_linked_to_another_file_is_not_read(tmp_path: Path) -> None:
    """The session points its transcript at a file its sandbox hides (a key): the actor,
    outside the sandbox, must not read it and send it home."""
    secret = tmp_path / "id_ed25519"
    secret.write_bytes(b"PRIVATE KEY\n")
    node = tmp_path / "node.jsonl"
    node.symlink_to(secret)
    tail = transcripts.Tail(node, read_regular)
    assert tail.delta() is None


def test_an_unchanged_transcript_is_not_read_again_but_a_rewrite_that_restores_its_mtime_is(
    tmp_path: Path,
) -> None:
    """The relay asks for a delta every poll: a file unchanged since it was last read is
    not read again. A session that rewrites it to the same size and puts its mtime back
    (to look unchanged) is still seen: the ctime cannot be put back."""
    node, copy = tmp_path / "node.jsonl", tmp_path / "copy.jsonl"
    reads: list[Path] = []

    def counting(path: Path, limit: int) -> bytes | None:
        reads.append(path)
        return read_regular(path, limit)

    tail = transcripts.Tail(node, counting)
    node.write_bytes(b'{"usage": 900}\n')
    _follow(tail, copy)
    assert len(reads) == 1
    assert tail.delta() is None and tail.delta() is None
    assert len(reads) == 1  # unchanged: not read again
    before = node.stat()
    node.write_bytes(b'{"usage": 100}\n')  # same size
    os.utime(node, ns=(before.st_atime_ns, before.st_mtime_ns))
    delta = tail.delta()
    assert delta == {"offset": 0, "data": b'{"usage": 100}\n'}  # sent whole
    assert transcripts.keep(copy, delta)
    assert copy.read_bytes() == node.read_bytes()
