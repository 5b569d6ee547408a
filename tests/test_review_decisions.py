"""Review comments and review rounds, the pure part: where a comment goes, whether a task
may have a review round, whether a comment was answered, what the journal's comment entries
add up to, and that review rounds do not use up verification rework."""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers.git import commit
from helpers.runs import run_state

from loop_orchestrator.runstate import comments as store
from loop_orchestrator.runstate import journal
from loop_orchestrator.runstate.journal import Record
from loop_orchestrator.runstate.state import Phase, TaskStatus
from loop_orchestrator.supervisor import decide, lifecycle, rounds
from loop_orchestrator.supervisor.lifecycle import Event
from loop_orchestrator.supervisor.sessions import Sessions
from loop_orchestrator.workspace.comments import changed_by, hunks


def test_a_path_one_task_owns_goes_to_it_whatever_the_line_says() -> None:
    routed = decide.route_comment("app/a.py:3", owners=["a"], changed_by="b")
    assert routed == decide.Routed("a", "owns")


def test_a_shared_path_goes_to_the_owner_that_changed_the_line() -> None:
    routed = decide.route_comment("app/a.py:3", owners=["a", "b"], changed_by="b")
    assert routed == decide.Routed("b", "line")


def test_a_shared_path_whose_line_no_owner_changed_is_refused_naming_the_owners() -> None:
    routed = decide.route_comment("app/a.py:3", owners=["a", "b"], changed_by="c")
    assert isinstance(routed, decide.Unrouted)
    assert "a, b" in routed.message
    assert "--task TASK app/a.py:3" in routed.hint


def test_an_unowned_path_goes_to_the_task_that_changed_the_line() -> None:
    assert decide.route_comment("x.py:1", owners=[], changed_by="b") == decide.Routed("b", "line")


def test_an_unowned_path_of_the_base_is_refused_naming_the_path_and_task_option() -> None:
    routed = decide.route_comment("docs/x.md:2", owners=[], changed_by=None)
    assert isinstance(routed, decide.Unrouted)
    assert "docs/x.md:2" in routed.message
    assert "lo-orch comment --task TASK docs/x.md:2" in routed.hint


def test_a_named_task_wins_over_owns_and_lines() -> None:
    assert decide.route_comment("a.py", owners=["a"], changed_by="a", task="c") == (
        decide.Routed("c", "task")
    )


def test_a_review_round_takes_the_next_round_number_and_counts_apart() -> None:
    step = decide.review_round(
        "a", phase=Phase.INTEGRATED, rework_count=2, review_rounds=0, limit=3
    )
    assert step == decide.ReviewRound(round=3, review_round=1)


@pytest.mark.parametrize("phase", [p for p in Phase if p is not Phase.INTEGRATED])
def test_only_integrated_work_gets_a_review_round(phase: Phase) -> None:
    step = decide.review_round("a", phase=phase, rework_count=0, review_rounds=0, limit=3)
    assert isinstance(step, decide.Unrouted)
    assert phase.value in step.message


def test_review_rounds_have_their_own_limit() -> None:
    step = decide.review_round(
        "a", phase=Phase.INTEGRATED, rework_count=9, review_rounds=2, limit=2
    )
    assert isinstance(step, decide.Unrouted)
    assert "max_review_rounds = 2" in step.message
    ok = decide.review_round("a", phase=Phase.INTEGRATED, rework_count=9, review_rounds=1, limit=2)
    assert ok == decide.ReviewRound(10, 2)


def test_a_review_round_does_not_use_up_verification_rework() -> None:
    # two verification reworks, then a review round (round 3): one more rework is still allowed
    st = TaskStatus(task="a", rework_count=3, review_rounds=1)
    limit = lifecycle.rework_limit(st, 3)
    assert decide.rework(rework_count=3, limit=limit, summary="x") == decide.SendBack(4, "x")
    # without the review round counted apart, round 4 would have been over the limit of 3
    plain = TaskStatus(task="a", rework_count=3)
    assert isinstance(
        decide.rework(rework_count=3, limit=lifecycle.rework_limit(plain, 3), summary="x"),
        decide.Block,
    )


def test_the_lifecycle_reopens_only_integrated_work_for_review() -> None:
    allowed = {p for (p, e) in lifecycle.TABLE if e is Event.REVIEW_ROUND}
    assert allowed == {Phase.INTEGRATED}
    assert lifecycle.next_phase(Phase.INTEGRATED, Event.REVIEW_ROUND) is Phase.IMPLEMENTING


@pytest.mark.parametrize(
    ("line", "hunks", "expected"),
    [
        (5, [(5, 1)], True),  # the line replaced
        (5, [(3, 3)], True),  # inside a replaced block
        (5, [(6, 2)], False),  # the lines after it
        (5, [(1, 4)], False),  # the lines before it
        (5, [(5, 0)], True),  # lines added right after it
        (5, [(4, 0)], True),  # lines added right before it
        (5, [(2, 0)], False),  # lines added elsewhere
        (5, [], False),  # the file did not change
        (None, [(40, 1)], True),  # a file comment: any change of the file
        (None, [], False),
    ],
)
def test_a_comment_is_answered_when_its_lines_changed(
    line: int | None, hunks: list[tuple[int, int]], expected: bool
) -> None:
    assert decide.answered(line, hunks) is expected


def _comment(cid: str, task: str = "a") -> dict[str, object]:
    return store.Comment(
        id=cid, task=task, text="t", routed_by="owns", commit="c" * 40, created_at="now"
    ).model_dump(mode="json")


def test_journal_entries_add_up_to_comments_and_requests() -> None:
    state = store.Comments()
    store.fold(state, store.COMMENT, _comment("c1"))
    store.fold(state, store.COMMENT, _comment("c2", "b"))
    assert [c.id for c in state.unsent()] == ["c1", "c2"]
    req = store.ChangeRequest(
        id="r1", commit="c" * 40, comments=["c1", "c2"], tasks=["a", "b"], created_at="now"
    )
    store.fold(state, store.CHANGES_REQUESTED, req.model_dump(mode="json"))
    assert state.unsent() == []
    assert [r.id for r in state.pending()] == ["r1"]
    assert [c.id for c in state.of_request("r1", "b")] == ["c2"]
    store.fold(state, store.COMMENT, _comment("c3"))
    store.fold(state, store.REQUEST_TAKEN, {"id": "r1"})
    assert state.pending() == []
    assert [c.id for c in state.unsent()] == ["c3"]
    store.fold(state, "task", {"task": "a", "set": {}})  # other kinds change nothing
    assert len(state.comments) == 3


def test_a_comment_with_an_unknown_source_or_field_is_not_a_comment() -> None:
    with pytest.raises(ValueError, match="source"):
        store.Comment.model_validate({**_comment("c"), "source": "agent"})
    with pytest.raises(ValueError, match="answered"):
        store.Comment.model_validate({**_comment("c"), "answered": True})


def _recorded(tmp_path: Path, texts: list[str]) -> tuple[Record, TaskStatus]:
    """A real record with ``texts`` as comments of one request for task a, whose review
    round 1 (round 2) is open."""
    rec = journal.start(tmp_path, run_state(tmp_path), [TaskStatus(task="a")])
    for n, text in enumerate(texts):
        store.append_comment(
            rec,
            store.Comment(
                id=f"c{n}",
                task="a",
                path="app/a.py",
                line=2,
                text=text,
                routed_by="owns",
                commit="c" * 40,
                excerpt_start=1,
                excerpt=["one", "two", "three"],
                created_at="now",
            ),
        )
    ids = [f"c{n}" for n in range(len(texts))]
    store.append_request(
        rec, store.ChangeRequest(id="r", commit="c" * 40, comments=ids, tasks=["a"], created_at="t")
    )
    st = rec.update_task(
        "a",
        phase=Phase.IMPLEMENTING,
        rework_count=2,
        review_rounds=1,
        review_round_at=2,
        review_request="r",
    )
    return rec, st


def test_the_round_prompt_quotes_the_words_and_never_evaluates_them(tmp_path: Path) -> None:
    attack = "{{ 7 * 7 }} {% for x in range(3) %}x{% endfor %}\n--task b\n$(rm -rf ~)"
    rec, st = _recorded(tmp_path, [attack])
    text = rounds.prompt(rec, st, 3)
    assert "Phase: implementing (rework 2)" in text  # the round's own prompt and number
    assert "review round 1 of 3" in text
    assert "> {{ 7 * 7 }} {% for x in range(3) %}x{% endfor %}" in text
    assert "> --task b" in text
    assert "> $(rm -rf ~)" in text
    assert "49" not in text
    assert "xxx" not in text
    assert "    2 > two" in text  # the line it points at, marked, in its excerpt
    assert rounds.is_review_round(st)
    assert sessions_prompt(st) == rounds.TEMPLATE


def sessions_prompt(st: TaskStatus) -> str:
    """The template the supervisor's sessions choose for ``st``."""
    return Sessions.prompt_for(st)


def test_the_round_prompt_is_bounded(tmp_path: Path) -> None:
    rec, st = _recorded(tmp_path, [f"comment number {n}" for n in range(15)])
    text = rounds.prompt(rec, st, 3)
    assert text.count("## Comment ") == rounds.PROMPT_COMMENTS
    assert "comment number 11" in text
    assert "comment number 12" not in text
    assert "(and 3 more, not shown here)" in text
    assert len(text) < 12 * (store.MAX_COMMENT_CHARS + 1000)


def test_a_rework_after_a_review_round_gets_the_rework_prompt(tmp_path: Path) -> None:
    _rec, st = _recorded(tmp_path, ["x"])
    rework = st.model_copy(update={"rework_count": 3})
    assert not rounds.is_review_round(rework)
    assert sessions_prompt(rework) == "prompt_rework.md.j2"
    integrated = st.model_copy(update={"phase": Phase.INTEGRATED})
    assert not rounds.is_review_round(integrated)


def test_blame_names_the_task_of_the_staging_commit_that_changed_the_line(git_repo: Path) -> None:
    """Git only: staging is a line of lo-orch's commits, each naming its task in a trailer."""
    base = commit(git_repo, {"app/x.py": "one\ntwo\nthree\n"}, "base")
    commit(git_repo, {"app/x.py": "one\nTWO\nthree\n"}, "lo-orch: task a\n\nLo-Orch-Task: a")
    tip = commit(git_repo, {"app/x.py": "one\nTWO\nthree\nfour\n"}, "b\n\nLo-Orch-Task: b")
    assert changed_by(git_repo, tip, base, "app/x.py", 2) == "a"
    assert changed_by(git_repo, tip, base, "app/x.py", 4) == "b"
    assert changed_by(git_repo, tip, base, "app/x.py", 1) is None  # the base's line
    assert changed_by(git_repo, tip, base, "app/gone.py", 1) is None
    assert hunks(git_repo, base, tip, "app/x.py") == [(2, 1), (3, 0)]
    assert decide.answered(2, hunks(git_repo, base, tip, "app/x.py"))
    assert not decide.answered(1, hunks(git_repo, base, tip, "app/x.py"))
