"""The spend book: spend read from a transcript never goes down, whatever the file says."""

from __future__ import annotations

import json
from pathlib import Path

from loop_orchestrator.cost import usage
from loop_orchestrator.cost.spend import SpendBook

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
