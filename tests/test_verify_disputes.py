"""Disputable findings: `lo-orch signal impl_done --dispute CODE --note ...`,
judged by the auditor or carried to Gate 2; hard findings never disputable; every dispute
and its outcome in the review file and the ledger."""

from __future__ import annotations

import shlex
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
from helpers.git import commit
from helpers.served import Served, env_for, lo_orch_env, serve, working
from helpers.verify import off

from loop_orchestrator.config import Settings
from loop_orchestrator.plan.model import DoneCheck, Task
from loop_orchestrator.runstate.state import Phase, RunDir
from loop_orchestrator.sessions import hooks, inbox
from loop_orchestrator.verify import disputes, rework_prompt, verify_task, write_review
from loop_orchestrator.verify.models import Finding, Severity, Verdict, blocking, warning
from loop_orchestrator.verify.review import gate2_notes

PY = shlex.quote(sys.executable)

MONEY = """class Money:
    def __init__(self, cents):
        self.cents = cents

    def __eq__(self, other):
        return isinstance(other, Money) and other.cents == self.cents
"""
#: honest, but the heuristic cannot tell: a lone reflexivity check of Money.__eq__
MONEY_TEST = """from app.money import Money


def test_money_equals_itself():
    m = Money(5)
    assert m == m
"""


def money_task() -> Task:
    return Task(
        id="money",
        objective="Money compares by value",
        owns=["app/money.py", "tests/test_money.py"],
        done=[DoneCheck(criterion="tests pass", check=f"{PY} -m pytest -q tests/test_money.py")],
    )


def settings(tmp_path: Path, auditor: str | None) -> Settings:
    s = off()  # (the auditor is set below)
    if auditor is None:
        s.auditor.llm = "off"
        return s
    script = tmp_path / "auditor.py"
    # the auditor must see the dispute: it answers PASS only when it was shown the reason
    script.write_text(
        "import sys, json\ndata = json.load(sys.stdin)\n"
        "seen = any(f.get('dispute') for f in data['findings'])\n"
        f"print({auditor!r} if seen else 'VERDICT: FAIL')\nprint('REASONS: judged')\n",
        encoding="utf-8",
    )
    s.auditor.llm = f"{PY} {shlex.quote(str(script))}"
    return s


def verify_money(
    repo: Path,
    tmp_path: Path,
    base: str,
    head: str,
    *,
    task: Task | None = None,
    auditor: str | None = None,
    claims: Sequence[tuple[str, str]] = (),
) -> Verdict:
    """verify_task of the money task (or ``task``) from ``base`` to ``head``, with the
    ``settings(tmp_path, auditor)`` and the session's ``claims`` (disputes)."""
    return verify_task(
        repo,
        RunDir(repo),
        task if task is not None else money_task(),
        base,
        head,
        brief="b",
        settings=settings(tmp_path, auditor),
        claims=claims,
    )


@pytest.fixture
def money(git_repo: Path) -> tuple[Path, str, str]:
    base = commit(git_repo, {"app/__init__.py": '"""The app."""\n'})
    head = commit(git_repo, {"app/money.py": MONEY, "tests/test_money.py": MONEY_TEST})
    return git_repo, base, head


CLAIM = ("tests.tautology", "the test checks that Money.__eq__ is reflexive")


@pytest.mark.slow
def test_without_a_dispute_the_heuristic_blocks(
    money: tuple[Path, str, str], tmp_path: Path
) -> None:
    repo, base, head = money
    verdict = verify_money(repo, tmp_path, base, head)
    assert not verdict.passed
    assert [f.check for f in verdict.blocking] == ["tests.tautology"]
    assert verdict.disputes == []


@pytest.mark.slow
def test_a_dispute_with_no_auditor_is_carried_to_gate_2(
    money: tuple[Path, str, str], tmp_path: Path
) -> None:
    repo, base, head = money
    verdict = verify_money(repo, tmp_path, base, head, claims=[CLAIM])
    assert verdict.passed
    [f] = [f for f in verdict.findings if f.check == "tests.tautology"]
    assert (f.severity, f.dispute) == (Severity.WARNING, CLAIM[1])
    [d] = verdict.disputes
    assert (d.check, d.outcome) == ("tests.tautology", "carried")
    notes = gate2_notes({"money": verdict})
    assert any(
        "tests.tautology disputed by the session (carried)" in n and CLAIM[1] in n for n in notes
    ), notes


@pytest.mark.slow
@pytest.mark.parametrize(
    ("answer", "outcome", "passed"),
    [("VERDICT: PASS", "upheld", True), ("VERDICT: FAIL", "rejected", False)],
)
def test_the_auditor_judges_a_dispute(
    money: tuple[Path, str, str], tmp_path: Path, answer: str, outcome: str, passed: bool
) -> None:
    repo, base, head = money
    task = money_task()
    verdict = verify_money(repo, tmp_path, base, head, task=task, auditor=answer, claims=[CLAIM])
    assert verdict.passed is passed
    [d] = verdict.disputes
    assert d.outcome == outcome
    [f] = [f for f in verdict.findings if f.check == "tests.tautology"]
    assert f.blocking is (outcome == "rejected")
    if not passed:
        review = write_review(RunDir(repo), task, 1, verdict, max_rounds=3).read_text()
        assert "## Disputes (1)" in review and "**rejected**" in review
        assert CLAIM[1] in review


@pytest.mark.slow
def test_hard_findings_are_never_disputable(money: tuple[Path, str, str], tmp_path: Path) -> None:
    repo, base, _ = money
    head = commit(repo, {"README.md": "edited outside owns\n"})
    verdict = verify_money(
        repo, tmp_path, base, head, claims=[CLAIM, ("scope.unowned", "the readme needed it")]
    )
    assert not verdict.passed
    assert {f.check for f in verdict.blocking} >= {"scope.unowned", "tests.tautology"}
    outcomes = {d.check: d.outcome for d in verdict.disputes}
    # refused (hard); the heuristic one stays blocking while something else blocks
    assert outcomes == {"scope.unowned": "refused", "tests.tautology": "deferred"}


@pytest.mark.slow
def test_the_review_and_the_rework_prompt_offer_disputes_for_heuristics_only(
    money: tuple[Path, str, str], tmp_path: Path
) -> None:
    repo, base, _ = money
    head = commit(repo, {"README.md": "edited outside owns\n"})
    task = money_task()
    verdict = verify_money(repo, tmp_path, base, head, task=task)
    path = write_review(RunDir(repo), task, 1, verdict, max_rounds=3)
    review = path.read_text()
    assert "signal impl_done --dispute CODE" in review
    assert "Disputable here: `tests.tautology`." in review
    prompt = rework_prompt(path, task_id="money", round_no=1, max_rounds=3, verdict=verdict)
    assert "--dispute tests.tautology" in prompt
    assert "scope.unowned" not in prompt.split("Disputable:")[1]


def test_the_rework_prompt_says_what_became_of_the_disputes(
    money: tuple[Path, str, str], tmp_path: Path
) -> None:
    # a dispute of a finding the round does not have changes nothing, and the session is
    # told so instead of sending it again
    repo, base, head = money
    task = money_task()
    verdict = verify_money(
        repo, tmp_path, base, head, task=task, claims=[("tests.no-assertion", "my test asserts")]
    )
    assert not verdict.passed
    assert [f.check for f in verdict.blocking] == ["tests.tautology"]
    path = write_review(RunDir(repo), task, 1, verdict, max_rounds=3)
    prompt = rework_prompt(path, task_id="money", round_no=1, max_rounds=3, verdict=verdict)
    assert "your dispute of tests.no-assertion: moot (no blocking finding" in prompt
    assert "--dispute tests.tautology" in prompt
    assert "holds for that one impl_done" in prompt


def test_hold_and_settle() -> None:
    found: list[Finding] = [
        blocking("m", "tests.tautology", "t.py", 3),
        blocking("m", "scope.unowned", "R"),
        warning("w", "tests.broad-raises", "t.py", 4),
    ]
    held, ds = disputes.hold(
        found,
        [
            ("tests.tautology", " why "),
            ("tests.skip", "x"),
            ("done.failed", "flaky"),
            ("Bad Code", "x"),
        ],
    )
    assert [(d.check, d.outcome) for d in ds] == [
        ("tests.tautology", "carried"),
        ("tests.skip", "moot"),
        ("done.failed", "refused"),
        ("Bad Code", "refused"),
    ]
    assert held[0].severity is Severity.WARNING and held[0].dispute == "why"
    assert held[1].blocking  # scope untouched
    # something else still blocks: the dispute waits, the finding blocks again
    after, settled = disputes.settle(
        held, ds, auditor_status="skipped", auditor_mode="off", reasons=[]
    )
    assert settled[0].outcome == "deferred" and after[0].blocking
    assert disputes.disputable(found) == ["tests.tautology"]


# the signal path -----------------------------------------------------------------------


@pytest.fixture
def implementing(git_repo: Path) -> Iterator[Served]:
    with serve(git_repo, {"alpha": working(Phase.IMPLEMENTING, rework=1), "beta": {}}) as s:
        yield s


def test_signal_carries_disputes_to_the_record_and_the_ledger(implementing: Served) -> None:
    s = implementing
    hooks.signal_task(
        s.run_dir,
        "impl_done",
        task="alpha",
        note=CLAIM[1],
        disputes=["tests.tautology", "tests.tautology"],
    )
    st = s.status()
    assert st.phase is Phase.IMPL_DONE
    assert st.disputes == [{"check": "tests.tautology", "note": CLAIM[1]}]
    [line] = s.ledger("signal")
    assert line["disputes"] == ["tests.tautology"] and line["note"] == CLAIM[1]
    # the next round's impl_done without disputes clears them
    s.set("alpha", **working(Phase.IMPLEMENTING, rework=2))
    hooks.signal_task(s.run_dir, "impl_done", task="alpha")
    assert s.status().disputes == []


@pytest.mark.parametrize(
    ("kwargs", "error"),
    [
        ({"disputes": ["scope.unowned"], "note": "x"}, "hard finding"),
        ({"disputes": ["done.new-test-missing"], "note": "x"}, "hard finding"),
        ({"disputes": ["tests.tautology"]}, "needs a reason"),
        ({"disputes": ["tests tautology"], "note": "x"}, "not a finding id"),
    ],
)
def test_the_client_refuses_bad_disputes(
    implementing: Served, kwargs: dict[str, Any], error: str
) -> None:
    from loop_orchestrator.errors import UsageError

    with pytest.raises(UsageError, match=error):
        hooks.signal_task(implementing.run_dir, "impl_done", task="alpha", **kwargs)
    assert implementing.status().phase is Phase.IMPLEMENTING
    with pytest.raises(UsageError, match="impl_done` only"):
        hooks.signal_task(
            implementing.run_dir, "blocked", task="alpha", note="n", disputes=["tests.tautology"]
        )


def test_the_supervisor_refuses_a_hard_dispute_sent_past_the_client(implementing: Served) -> None:
    # a session talking to the socket itself, as an agent could
    reply = inbox.send(
        implementing.run_dir,
        {
            "type": "signal",
            "task": "alpha",
            "phase": "impl_done",
            "note": "trust me",
            "disputes": ["secrets.assignment"],
        },
    )
    assert reply["ok"] is False and "cannot dispute secrets.assignment" in reply["message"]
    assert implementing.status().phase is Phase.IMPLEMENTING
    assert implementing.status().disputes == []
    assert implementing.ledger("signal_rejected")
    # nor a reason made of blanks, which the client would have refused
    reply = inbox.send(
        implementing.run_dir,
        {
            "type": "signal",
            "task": "alpha",
            "phase": "impl_done",
            "note": " \n\t",
            "disputes": ["tests.tautology"],
        },
    )
    assert reply["ok"] is False and "needs a reason" in reply["message"]
    assert implementing.status().phase is Phase.IMPLEMENTING
    # an older client's message (no "disputes" key) is judged as before
    reply = inbox.send(
        implementing.run_dir,
        {"type": "signal", "task": "alpha", "phase": "impl_done", "note": None},
    )
    assert reply["ok"] is True
    assert implementing.status().phase is Phase.IMPL_DONE


def test_the_cli_dispute_option(implementing: Served) -> None:
    result = lo_orch_env(
        ["signal", "impl_done", "--dispute", "scope.unowned", "--note", "x"],
        env_for(implementing.run_dir),
    )
    assert result.returncode == 2
    assert "Error: cannot dispute scope.unowned" in result.stderr
    result = lo_orch_env(
        ["signal", "impl_done", "--dispute", "tests.tautology", "--note", CLAIM[1]],
        env_for(implementing.run_dir),
    )
    assert result.returncode == 0, result.stderr
    assert implementing.status().disputes == [{"check": "tests.tautology", "note": CLAIM[1]}]
