"""The spend book: spend read from a transcript never goes down, whatever the file says."""

from __future__ import annotations

import json
import threading
from pathlib import Path

from loop_orchestrator.cost import usage
from loop_orchestrator.cost.spend import SpendBook
from loop_orchestrator.supervisor.accounting import last_words_needle, wait_for_text

OPUS = usage.DEFAULT_PRICES


def record(mid: str, out: int, inp: int = 100) -> str:
    return (
        json.dumps(
            {
                "type": "assistant",
                "message": {
                    "id": mid,
                    "model": "claude-opus-5-5",
                    "usage": {"input_tokens": inp, "output_tokens": out},
                },
            }
        )
        + "\n"
    )


def total(book: SpendBook, task: str = "t") -> dict[str, int]:
    u = usage.price(book.messages(task), OPUS)
    # the sums kept as messages are booked price the same as the messages themselves
    assert usage.price(book.totals(task), OPUS) == u
    return {"input_tokens": u.tokens["input_tokens"], "output_tokens": u.tokens["output_tokens"]}


def test_a_truncated_transcript_keeps_its_spend_and_is_named(tmp_path: Path) -> None:
    book = SpendBook(tmp_path / "private" / "spend.jsonl")
    tr = tmp_path / "s.jsonl"
    tr.write_text(record("m1", 10) + record("m1", 10) + record("m2", 20), encoding="utf-8")
    seen = book.observe("t", "s", tr)
    assert seen.new == 2 and not seen.tampered
    assert total(book) == {"input_tokens": 200, "output_tokens": 30}
    # the session empties its transcript and goes on
    tr.write_text(record("m3", 5), encoding="utf-8")
    seen = book.observe("t", "s", tr)
    assert seen.tampered and "shrank" in seen.tampered[0] and "2 message(s)" in seen.tampered[0]
    assert total(book) == {"input_tokens": 300, "output_tokens": 35}
    # the book outlives the supervisor: a new one reads the same spend back
    again = SpendBook(tmp_path / "private" / "spend.jsonl")
    assert total(again) == {"input_tokens": 300, "output_tokens": 35}
    # a message edited in place to fewer tokens (same size) keeps its first figures
    tr.write_text(record("m3", 1) + " " * 10, encoding="utf-8")
    seen = again.observe("t", "s", tr)
    assert any("fewer tokens" in t for t in seen.tampered), seen.tampered
    assert total(again) == {"input_tokens": 300, "output_tokens": 35}


def test_figures_that_grow_count_and_tasks_stay_apart(tmp_path: Path) -> None:
    book = SpendBook(tmp_path / "spend.jsonl")
    tr = tmp_path / "s.jsonl"
    tr.write_text(record("m1", 10), encoding="utf-8")
    book.observe("t", "s", tr)
    tr.write_text(record("m1", 40) + record("m2", 1), encoding="utf-8")
    seen = book.observe("t", "s", tr)
    assert not seen.tampered
    assert total(book) == {"input_tokens": 200, "output_tokens": 41}
    assert total(book, "other") == {"input_tokens": 0, "output_tokens": 0}


def test_a_missing_transcript_and_a_torn_book_line(tmp_path: Path) -> None:
    path = tmp_path / "spend.jsonl"
    book = SpendBook(path)
    seen = book.observe("t", "s", tmp_path / "nothing.jsonl")
    assert seen.missing and not book.messages("t")
    tr = tmp_path / "s.jsonl"
    tr.write_text(record("m1", 10) + "not json\n", encoding="utf-8")
    assert book.observe("t", "s", tr).bad == 1
    with path.open("a", encoding="utf-8") as f:
        f.write('{"task": "t", "sess')  # a crash mid-append
    assert total(SpendBook(path)) == {"input_tokens": 100, "output_tokens": 10}


def prompt(text: str) -> str:
    return json.dumps({"type": "user", "message": {"role": "user", "content": text}}) + "\n"


def test_each_read_goes_on_from_the_last_one(tmp_path: Path) -> None:
    book = SpendBook(tmp_path / "spend.jsonl")
    tr = tmp_path / "s.jsonl"
    padding = "".join(record(f"p{i}", 1, 0) for i in range(200))  # well past TAIL_BYTES
    tr.write_text(padding + record("m1", 10), encoding="utf-8")
    book.observe("t", "s", tr)
    assert book.offset("t", "s") == tr.stat().st_size
    # the start of the file, read already, is no longer parsed: a line broken there (and
    # not in the last bytes read) does not count as malformed, nothing booked is gone
    broken = "x" * len(record("p0", 1, 0).rstrip("\n")) + "\n"
    tr.write_text(broken + padding[len(broken) :] + record("m1", 10), encoding="utf-8")
    with tr.open("a", encoding="utf-8") as fh:
        fh.write(prompt("Phase: implementing (rework 2)\n...") + record("m2", 7))
    seen = book.observe("t", "s", tr)
    assert seen.new == 1 and seen.bad == 0 and not seen.tampered
    # the rework round is carried from one read to the next
    assert [m.round for m in book.messages("t") if m.key == "m2"] == [2]
    with tr.open("a", encoding="utf-8") as fh:
        fh.write(record("m3", 3))
    book.observe("t", "s", tr)
    assert [m.round for m in book.messages("t") if m.key == "m3"] == [2]
    assert total(book)["output_tokens"] == 200 + 10 + 7 + 3


def test_a_line_being_written_is_read_once_whole(tmp_path: Path) -> None:
    book = SpendBook(tmp_path / "spend.jsonl")
    tr = tmp_path / "s.jsonl"
    line = record("m1", 10)
    tr.write_text(record("m0", 1) + line[:20], encoding="utf-8")
    seen = book.observe("t", "s", tr)
    assert seen.bad == 0 and [m.key for m in book.messages("t")] == ["m0"]
    with tr.open("a", encoding="utf-8") as fh:
        fh.write(line[20:])
    seen = book.observe("t", "s", tr)
    assert seen.new == 1 and seen.bad == 0
    assert total(book)["output_tokens"] == 11
    # the last line complete but without its newline is booked now, and not twice later
    with tr.open("a", encoding="utf-8") as fh:
        fh.write(record("m2", 5).rstrip("\n"))
    assert book.observe("t", "s", tr).new == 1
    with tr.open("a", encoding="utf-8") as fh:
        fh.write("\n" + record("m3", 2))
    assert book.observe("t", "s", tr).new == 1
    assert total(book)["output_tokens"] == 18


def test_a_rewrite_behind_the_offset_is_read_from_the_top(tmp_path: Path) -> None:
    # the session rewrites its transcript without the messages read so far, as long as
    # before or longer (so it does not shrink), in place or as a new file: lo-orch sees
    # the bytes it read last are not there any more, reads from the top and names it
    book = SpendBook(tmp_path / "spend.jsonl")
    for how in ("in place", "replaced"):
        tr = tmp_path / f"{how}.jsonl"
        tr.write_text(record("a1", 50) + record("a2", 50), encoding="utf-8")
        book.observe(how, "s", tr)
        forged = record("b1", 1) + " " * 200 + "\n"
        if how == "in place":
            tr.write_text(forged, encoding="utf-8")
        else:
            (tmp_path / "new.jsonl").write_text(forged, encoding="utf-8")
            (tmp_path / "new.jsonl").replace(tr)
        seen = book.observe(how, "s", tr)
        assert any("2 message(s)" in t and "gone" in t for t in seen.tampered), (how, seen)
        assert total(book, how)["output_tokens"] == 101


def test_a_turns_last_words_are_looked_for_as_the_transcript_writes_them() -> None:
    """At a turn's end lo-orch waits briefly for the turn's last message (the Stop hook
    names its text); it looks for the end of its last line as JSON writes it unchanged."""
    assert last_words_needle("Almost there.") == "Almost there."
    assert last_words_needle("Done.\n\nAll 12 tests pass now") == "All 12 tests pass now"
    # a quote or backslash is escaped in JSON: only what follows the last one
    assert last_words_needle('He said "ok" and left the room') == " and left the room"
    # not ASCII (JSON may escape it) or too short: nothing to wait for
    assert last_words_needle("fine ✓") is None
    assert last_words_needle("ok") is None
    assert len(last_words_needle("x" * 500) or "") == 48


def test_a_wait_for_a_message_sees_it_in_a_transcript_emptied_meanwhile(
    tmp_path: Path,
) -> None:
    """The transcript was read up to a far offset, then emptied by the session (the attack
    the spend book is for): the message written afterwards, at the new start of the file,
    is still found, on every poll and not only the first."""
    path = tmp_path / "t.jsonl"
    path.write_text("x" * 200_000 + "\n", encoding="utf-8")
    path.write_text("", encoding="utf-8")
    writer = threading.Timer(0.3, lambda: path.write_text('{"text": "Almost there."}\n'))
    writer.start()
    try:
        assert wait_for_text(path, "Almost there.", 3.0, start=200_001)
    finally:
        writer.join()
    assert not wait_for_text(path, "never written", 0.2, start=200_001)


def test_the_sums_priced_at_each_event_stay_one_per_round_and_model(tmp_path: Path) -> None:
    """Pricing a task's spend (at every hook event) reads one sum per round and model, not
    every message of its transcripts: the work does not grow with the transcript."""
    book = SpendBook(tmp_path / "spend.jsonl")
    tr = tmp_path / "s.jsonl"
    tr.write_text("".join(record(f"m{i}", i) for i in range(300)), encoding="utf-8")
    book.observe("t", "s", tr)
    tr.write_text(tr.read_text(encoding="utf-8") + record("m7", 50), encoding="utf-8")
    book.observe("t", "s", tr)  # a message booked again with more tokens replaces it
    [only] = book.totals("t")
    assert only.counts["output_tokens"] == sum(range(300)) - 7 + 50
    assert total(book) == {"input_tokens": 300 * 100, "output_tokens": sum(range(300)) + 43}
    again = SpendBook(tmp_path / "spend.jsonl")  # and so does a restarted supervisor's
    assert len(again.totals("t")) == 1 and total(again) == total(book)
