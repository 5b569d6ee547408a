"""Tokens, dollars and budgets of whole runs with the real Claude Code CLI.

The scripted endpoint says what each reply used (its request log's ``usage``); Claude Code
records it in its session transcript; lo-orch must read back exactly those figures, price
them from its table, and show them in status, `status --json`, Gate 2 and the ledger.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import threading
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers.agents import claude_settings, pane_pid
from helpers.runs import approve, edit_script, ledger, lo, only
from helpers.wait import wait_for

from loop_orchestrator.config import PriceConfig, Settings
from loop_orchestrator.cost import usage
from loop_orchestrator.runstate.progress import status_document
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.endpoint import ModelEndpoint, gateway_token
from loop_orchestrator.simulator.script import load_script
from loop_orchestrator.supervisor.main import Outcome, Supervisor
from loop_orchestrator.workspace import integration

KEYS = usage.TOKEN_KEYS
OPUS = usage.DEFAULT_PRICES["claude-opus-5-5"]


@contextlib.contextmanager
def cached_endpoint(f: demo.DemoFiles, **kw: Any) -> Iterator[ModelEndpoint]:
    with ModelEndpoint(
        load_script(f.script, model=True),
        cache=True,
        log_path=f.root / "requests.jsonl",
        poll_interval=0.05,
        **kw,
    ) as endpoint:
        yield endpoint


def until_implementing(endpoint: ModelEndpoint, task: str = "tokenize") -> None:
    """Wait until ``task``'s session has been sent its implement prompt."""
    endpoint.wait_for(
        lambda rs: any(r.get("task") == task and r.get("prompt_kind") == "implement" for r in rs),
        120,
    )


def supervise_beside(
    repo: Path, settings: Settings, side: Callable[[threading.Event], None]
) -> Outcome:
    """Run the supervisor while ``side(stop)`` runs on a thread; ``stop`` is set once the
    run is over, and the thread joined."""
    stop = threading.Event()
    thread = threading.Thread(target=side, args=(stop,))
    thread.start()
    try:
        return Supervisor(repo, settings).run()
    finally:
        stop.set()
        thread.join()


def watch_parked(repo: Path, stop: threading.Event) -> list[tuple[str | None, str | None]]:
    """Until ``stop``: what status said while tokenize was parked by a limit (its
    waiting_for, and slug's phase meanwhile), every 0.2 s."""
    seen: list[tuple[str | None, str | None]] = []
    while not stop.is_set():
        with contextlib.suppress(Exception):
            st = Store(RunDir(repo)).read_status("tokenize")
            doc = status_document(repo)
            slug = next(t for t in doc["tasks"] if t["task"] == "slug")
            mine = next(t for t in doc["tasks"] if t["task"] == "tokenize")
            if st.limit_until and mine.get("limit_until"):
                seen.append((mine["waiting_for"], slug["phase"]))
        stop.wait(0.2)
    return seen


def assert_resumed_cleanly(repo: Path) -> None:
    """tokenize waited out one limit and went on: no stall, no rework; slug done too."""
    st = Store(RunDir(repo)).read_status("tokenize")
    assert st.phase == Phase.INTEGRATED and st.rework_count == 0 and not st.nudged
    assert st.limit_hits == 1 and st.limit_until is None
    assert not ledger(repo, "nudged") and not ledger(repo, "rework")
    assert Store(RunDir(repo)).read_status("slug").phase == Phase.INTEGRATED


def sent(endpoint: ModelEndpoint, task: str) -> dict[str, int]:
    """What the endpoint reported as used by ``task``'s replies, summed."""
    out = dict.fromkeys(KEYS, 0)
    for r in endpoint.logged(kind="reply", task=task):
        for k in KEYS:
            out[k] += r["usage"][k]
    return out


def test_usage_figures_the_endpoint_sent_come_back_exactly(demo_files: demo.DemoFiles) -> None:
    only(demo_files, "tokenize", "counts")  # counts fails a check once: a rework round
    with cached_endpoint(demo_files) as endpoint:
        settings = claude_settings(endpoint)
        approve(demo_files, settings)
        outcome = Supervisor(demo_files.repo, settings).run()
        assert outcome.state == "review", outcome.message
        expected = {t: sent(endpoint, t) for t in ("tokenize", "counts")}
        rework = dict.fromkeys(KEYS, 0)
        for r in endpoint.logged(kind="reply", task="counts", prompt_kind="implement", round=1):
            for k in KEYS:
                rework[k] += r["usage"][k]
    for figures in expected.values():
        assert all(figures[k] > 0 for k in KEYS), figures  # all four kinds exercised
    doc = status_document(demo_files.repo)
    by_task = {t["task"]: t for t in doc["tasks"]}
    total_cost = 0.0
    for t, figures in expected.items():
        got = by_task[t]["usage"]
        assert {k: got[k] for k in KEYS} == figures  # tokens to the unit
        cost = OPUS.cost(figures)
        assert got["cost_usd"] == pytest.approx(cost, abs=1e-6)
        assert got["cost_known"] is True and got["models"] == ["claude-opus-5-5"]
        assert got["notes"] == []
        rounds = by_task[t]["usage_rounds"]
        assert {k: sum(r[k] for r in rounds.values()) for k in KEYS} == figures
        total_cost += cost
    # per round: what the rework prompt's replies used is round 1, the rest round 0
    rounds = by_task["counts"]["usage_rounds"]
    assert list(rounds) == ["0", "1"] and rework["output_tokens"] > 0
    assert {k: rounds["1"][k] for k in KEYS} == rework
    assert {k: rounds["0"][k] for k in KEYS} == {k: expected["counts"][k] - rework[k] for k in KEYS}
    assert list(by_task["tokenize"]["usage_rounds"]) == ["0"]
    run = doc["run"]["usage"]
    assert {k: run[k] for k in KEYS} == {k: sum(f[k] for f in expected.values()) for k in KEYS}
    assert run["cost_usd"] == pytest.approx(total_cost, abs=1e-6)
    # the ledger has the last figures of each task, and the run's
    last = {t: ledger(demo_files.repo, "usage", t)[-1] for t in expected}
    for t, figures in expected.items():
        assert {k: last[t][k] for k in KEYS} == figures
    (run_line,) = ledger(demo_files.repo, "run_usage")
    assert run_line["cost_usd"] == pytest.approx(total_cost, abs=1e-6)
    # `lo-orch status`: a cost column with each task's dollars, and the run's total
    shown = lo(demo_files.repo, "status")
    assert shown.returncode == 0, shown.stderr
    assert "cost" in shown.stdout.splitlines()[1] or "cost" in shown.stdout
    for t in expected:
        row = next(line for line in shown.stdout.splitlines() if line.lstrip().startswith(t))
        assert usage.money(by_task[t]["usage"]["cost_usd"]) in row, row
    assert f"Spent so far: {usage.money(run['cost_usd'])}" in shown.stdout
    # Gate 2: the actual figures per task, tokens to the unit, and the run's total
    review = integration.review(demo_files.repo)
    text = "\n".join(review.costs)
    for t, figures in expected.items():
        assert (
            f"{t}: {usage.money(by_task[t]['usage']['cost_usd'])} — input "
            f"{figures['input_tokens']:,}, output {figures['output_tokens']:,}, cache "
            f"read {figures['cache_read_input_tokens']:,}, cache write "
            f"{figures['cache_creation_input_tokens']:,} tokens"
        ) in text, text
    assert f"run total: {usage.money(run['cost_usd'])}" in text
    merge = lo(demo_files.repo, "merge", "--yes")
    assert merge.returncode == 0, merge.stderr
    assert "What it cost (actual" in merge.stdout and text.splitlines()[0] in merge.stdout


def test_a_price_from_config_and_an_unknown_model(demo_files: demo.DemoFiles) -> None:
    """A model the table does not know: tokens counted, cost unknown and said so (never
    $0); a price added in config prices it."""
    only(demo_files, "tokenize")
    with cached_endpoint(demo_files) as endpoint:
        settings = claude_settings(endpoint, model="claude-nova-9")
        approve(demo_files, settings)
        outcome = Supervisor(demo_files.repo, settings).run()
        assert outcome.state == "review", outcome.message
        figures = sent(endpoint, "tokenize")
    st = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert st.usage is not None
    assert {k: st.usage[k] for k in KEYS} == figures
    assert st.usage["cost_usd"] is None and st.usage["cost_known"] is False
    assert st.usage["models"] == ["claude-nova-9"]
    assert any("price unknown for model claude-nova-9" in n for n in st.usage["notes"])
    shown = lo(demo_files.repo, "status")
    row = next(line for line in shown.stdout.splitlines() if line.lstrip().startswith("tokenize"))
    assert "unknown" in row and "$0.0000" not in row
    # the same transcript, priced by a table with the model added
    settings.prices["claude-nova-9"] = PriceConfig(input=1, output=2, cache_read=0.5, cache_write=3)
    prices = usage.prices_from(settings)
    assert st.worktree and st.session_id
    again = usage.session_usage(Path(st.worktree), st.session_id, {}, prices)
    assert again.cost_usd == pytest.approx(
        (
            figures["input_tokens"] * 1
            + figures["output_tokens"] * 2
            + figures["cache_read_input_tokens"] * 0.5
            + figures["cache_creation_input_tokens"] * 3
        )
        / 1e6
    )


def _set_plan(f: demo.DemoFiles, change: Any) -> None:
    plan = yaml.safe_load(f.plan.read_text(encoding="utf-8"))
    change(plan)
    f.plan.write_text(yaml.safe_dump(plan, sort_keys=False), encoding="utf-8")


def test_a_task_over_its_budget_is_blocked_and_the_others_finish(
    demo_files: demo.DemoFiles,
) -> None:
    only(demo_files, "tokenize", "slug")
    # slug's plan gives it a budget its planning turn alone exceeds
    _set_plan(
        demo_files,
        lambda p: next(t for t in p["tasks"] if t["id"] == "slug").update(max_cost_usd=0.0001),
    )
    with cached_endpoint(demo_files) as endpoint:
        settings = claude_settings(endpoint)
        approve(demo_files, settings)
        outcome = Supervisor(demo_files.repo, settings).run()
        assert outcome.state == "blocked", outcome.message
        slug = Store(RunDir(demo_files.repo)).read_status("slug")
        assert slug.phase == Phase.BLOCKED
        assert slug.usage is not None and slug.usage["cost_usd"] > 0.0001
        assert slug.error is not None
        found = re.search(r"over its budget: spent \$([\d.]+) of \$0\.0001", slug.error)
        assert found, slug.error
        assert "lo-orch retry slug --budget" in slug.error
        # the spend it was stopped at is one the ledger recorded, over the cap; the rest of
        # that turn (the model's last words after its signal) may come on top, no new prompt
        spent = f"${found.group(1)}"
        recorded = [usage.money(e["cost_usd"]) for e in ledger(demo_files.repo, "usage", "slug")]
        assert spent in recorded and 0.0001 < float(found.group(1)) <= slug.usage["cost_usd"]
        # stopped at its turn boundary: it never got the implementation prompt
        kinds = {r["prompt_kind"] for r in endpoint.logged(kind="reply", task="slug")}
        assert kinds == {"plan"}, kinds
        (blocked,) = ledger(demo_files.repo, "task_blocked", "slug")
        assert spent in blocked["message"]
        # the other task finished its work
        assert Store(RunDir(demo_files.repo)).read_status("tokenize").phase == Phase.INTEGRATED
        # a person grants more: a budget not above what it spent is refused, clearly
        low = lo(demo_files.repo, "retry", "slug", "--budget", "0.00001")
        assert low.returncode == 1 and "not more than task 'slug' has spent" in low.stderr
        assert "lo-orch retry slug --budget" in low.stderr
        assert Store(RunDir(demo_files.repo)).read_status("slug").phase == Phase.BLOCKED
        neg = lo(demo_files.repo, "retry", "slug", "--budget", "-3")
        assert (
            neg.returncode != 0
            and Store(RunDir(demo_files.repo)).read_status("slug").phase == Phase.BLOCKED
        )
        ok = lo(demo_files.repo, "retry", "slug", "--budget", "5")
        assert ok.returncode == 0, ok.stderr
        assert "Its budget is now $5 in total." in ok.stdout
        outcome = Supervisor(demo_files.repo, settings).run()
        assert outcome.state == "review", outcome.message
    slug = Store(RunDir(demo_files.repo)).read_status("slug")
    assert slug.phase == Phase.INTEGRATED and slug.budget_usd == 5
    # its spend carried on from where it was: the rounds add up to its total
    assert slug.usage is not None and slug.usage["cost_usd"] > 0.0001
    assert {k: slug.usage[k] for k in KEYS} == {
        k: sum(r[k] for r in (slug.usage_rounds or {}).values()) for k in KEYS
    }


def test_the_run_stops_launching_when_its_budget_is_spent(demo_files: demo.DemoFiles) -> None:
    only(demo_files, "tokenize", "slug")
    # one after the other: the first spends the budget
    _set_plan(demo_files, lambda p: p.update(concurrency=1))
    with cached_endpoint(demo_files) as endpoint:
        settings = claude_settings(endpoint)
        settings.run.max_cost_usd = 0.0001
        approve(demo_files, settings)
        outcome = Supervisor(demo_files.repo, settings).run()
        assert outcome.state == "blocked", outcome.message
        store = Store(RunDir(demo_files.repo))
        phases = {t: store.read_status(t).phase for t in ("tokenize", "slug")}
        (second,) = [t for t, p in phases.items() if p == Phase.BLOCKED]
        (first,) = [t for t, p in phases.items() if p == Phase.INTEGRATED]
        st = store.read_status(second)
        assert st.error is not None and st.error.startswith(
            "not started: the run's budget is spent"
        )
        assert f"`lo-orch retry {second} --budget DOLLARS`" in st.error
        assert not endpoint.logged(kind="reply", task=second)  # never launched
        assert st.session_id is None
        ok = lo(demo_files.repo, "retry", second, "--budget", "5")
        assert ok.returncode == 0, ok.stderr
        outcome = Supervisor(demo_files.repo, settings).run()
        assert outcome.state == "review", outcome.message
        assert endpoint.logged(kind="reply", task=second)
    assert Store(RunDir(demo_files.repo)).read_status(first).phase == Phase.INTEGRATED


def test_a_rate_limit_parks_the_task_and_it_resumes_after_the_wait(
    demo_files: demo.DemoFiles,
) -> None:
    """429 with a long retry-after: Claude Code gives up on the turn (StopFailure
    rate_limit); the task waits (`waiting_limit`), no new session starts meanwhile, and it
    is resumed after the (shortened) wait: neither a stall nor a rework round."""
    only(demo_files, "tokenize", "slug")
    _set_plan(demo_files, lambda p: p.update(concurrency=1))  # slug waits for a free slot
    with cached_endpoint(demo_files) as endpoint:
        settings = claude_settings(endpoint)
        settings.run.limit_wait_seconds = 6
        approve(demo_files, settings)
        seen: list[tuple[str | None, str | None]] = []

        def watch(stop: threading.Event) -> None:
            # one 429 with a long retry-after, once tokenize has begun to implement
            until_implementing(endpoint)
            endpoint.fail(429, times=1, task="tokenize", retry_after=120)
            seen.extend(watch_parked(demo_files.repo, stop))

        outcome = supervise_beside(demo_files.repo, settings, watch)
        assert outcome.state == "review", outcome.message
        errors = endpoint.logged(task="tokenize", status=429)
        assert len(errors) == 1, errors  # no retry storm: retry-after was long
    (hit,) = ledger(demo_files.repo, "limit_hit", "tokenize")
    assert hit["error"] == "rate_limit" and hit["kind"] == "rate_limit"
    (resumed,) = ledger(demo_files.repo, "limit_resumed", "tokenize")
    waited = datetime.fromisoformat(resumed["ts"]) - datetime.fromisoformat(hit["ts"])
    assert 5 <= waited.total_seconds() < 30, waited
    assert seen and all(
        w and w.startswith("waiting_limit: rate_limit from the model API") for w, _ in seen
    ), seen
    # while the limit held, the other task was not launched
    assert all(phase == "pending" for _, phase in seen), seen
    assert_resumed_cleanly(demo_files.repo)


#: how long after its 429 a task parked by a usage limit waits (the grace fills the rest)
PARK = 12


def test_a_usage_limit_parks_the_task_until_its_reset_and_it_resumes(
    demo_files: demo.DemoFiles,
) -> None:
    """Anthropic's usage-limit answer (429, unified rate-limit headers ``rejected`` with a
    reset time): Claude Code says "You've hit your 5-hour limit · resets 4:25pm
    (Asia/Kolkata)" in the session's own time zone; lo-orch parks the task until exactly
    that minute (plus the grace), launches nothing meanwhile, and resumes it after the
    (shortened) reset: neither a stall nor a rework round.

    The reset falls 52 s past the minute the session names, so a park until the exact
    reset, or until the minute rounded, is a minute off; the grace is chosen once the
    minute is known, so the park ends ``PARK`` seconds after the 429 wherever in the
    minute it falls (with a fixed grace, 15 to 75 s)."""
    only(demo_files, "tokenize", "slug")
    _set_plan(demo_files, lambda p: p.update(concurrency=1))  # slug waits for a free slot
    token = gateway_token()  # a gateway login: the CLI shows the usage-limit message
    with cached_endpoint(demo_files, token=token) as endpoint:
        settings = claude_settings(endpoint)
        settings.agent.env["TZ"] = "Asia/Kolkata"  # a half-hour zone, not UTC
        approve(demo_files, settings)
        seen: list[tuple[str | None, str | None]] = []

        def watch(stop: threading.Event) -> None:
            until_implementing(endpoint)
            now = time.time()
            # the last minute that leaves a grace of 2 s or more; its reset 52 s past it,
            # 2 s or more ahead (a 429 sent more than 8 s late names the next minute: the
            # park is a minute longer, the figures below still exact). A retry-after of
            # 60 s or more: Claude Code gives up at once rather than wait for a near reset.
            minute = (now + PARK - 2) // 60 * 60
            settings.run.usage_limit_grace_seconds = round(now + PARK - minute)
            endpoint.fail(
                429, times=1, task="tokenize", resets_in=minute + 52 - now, retry_after=120
            )
            seen.extend(watch_parked(demo_files.repo, stop))

        outcome = supervise_beside(demo_files.repo, settings, watch)
        assert outcome.state == "review", outcome.message
        (error,) = endpoint.logged(task="tokenize", status=429)  # no retry storm
    reset = datetime.fromtimestamp(error["resets_at"], UTC)
    (hit,) = ledger(demo_files.repo, "limit_hit", "tokenize")
    assert hit["error"] == "rate_limit" and hit["kind"] == "usage_limit", hit
    # the reset minute the session said in Asia/Kolkata, back in UTC, plus the grace
    until = datetime.fromisoformat(hit["until"])
    grace = timedelta(seconds=settings.run.usage_limit_grace_seconds)
    assert grace >= timedelta(seconds=2), grace
    assert until == reset.replace(second=0) + grace, (until, reset, grace)
    assert hit["message"] == f"usage limit, resets {reset:%H:%M} UTC"
    # its StopFailure was heard (the message named the reset)
    (failure,) = [
        e
        for e in ledger(demo_files.repo, "hook", "tokenize")
        if e.get("hook_event") == "StopFailure"
    ]
    assert failure["error"] == "rate_limit"
    resumed = ledger(demo_files.repo, "limit_resumed", "tokenize") + ledger(
        demo_files.repo, "limit_over", "tokenize"
    )
    assert resumed, "never resumed"
    first = min(datetime.fromisoformat(e["ts"]) for e in resumed)
    assert first >= until - timedelta(seconds=1), (first, until)
    assert seen and all(
        w and w.startswith(f"waiting_limit: usage limit, resets {reset:%H:%M}") for w, _ in seen
    ), seen
    assert all(phase == "pending" for _, phase in seen), seen  # nothing launched meanwhile
    assert_resumed_cleanly(demo_files.repo)


def test_a_session_that_dies_while_parked_is_noticed_at_once(
    demo_files: demo.DemoFiles,
    tmux_socket: str,
) -> None:
    """Claude Code is killed while its task waits out a rate limit: the death is seen
    within seconds (not when the wait ends), the session is relaunched once as any dead
    session is, sent nothing while the limit holds, and resumed after the wait."""
    only(demo_files, "tokenize")
    wait = 18.0
    with cached_endpoint(demo_files) as endpoint:
        settings = claude_settings(endpoint)
        settings.run.limit_wait_seconds = wait
        approve(demo_files, settings)
        killed: list[datetime] = []

        def attack(stop: threading.Event) -> None:
            until_implementing(endpoint)
            endpoint.fail(429, times=1, task="tokenize", retry_after=120)
            parked: list[str] = []

            def parked_or_over() -> bool:
                with contextlib.suppress(Exception):
                    st = Store(RunDir(demo_files.repo)).read_status("tokenize")
                    if st.limit_until and st.pane_id:
                        parked.append(st.pane_id)
                return bool(parked) or stop.is_set()

            wait_for(parked_or_over, 120, "tokenize parked by the limit", interval=0.2)
            if parked:
                pid = pane_pid(tmux_socket, parked[0])
                killed.append(datetime.now(UTC))
                # the pane's own process (Claude Code), started by this test's run
                os.kill(pid, signal.SIGKILL)

        outcome = supervise_beside(demo_files.repo, settings, attack)
        assert outcome.state == "review", outcome.message
        assert killed, "the task was never parked"
        (hit,) = ledger(demo_files.repo, "limit_hit", "tokenize")
        until = datetime.fromisoformat(hit["until"])
        (died,) = ledger(demo_files.repo, "session_died", "tokenize")
        noticed = datetime.fromisoformat(died["ts"])
        # noticed at once: seconds after the kill, long before the wait was over
        assert (noticed - killed[0]).total_seconds() < 8, (noticed, killed)
        assert noticed < until - timedelta(seconds=10), (noticed, until)
        assert ledger(demo_files.repo, "relaunched_while_parked", "tokenize")
        # no turn was asked of the model between the kill and the end of the wait
        asked = [
            (r["kind"], r.get("prompt_kind"), r.get("text"))
            for r in endpoint.logged(task="tokenize")
            if killed[0].timestamp() < r["at"] < until.timestamp() - 1
        ]
        assert not asked, asked
        (resumed,) = ledger(demo_files.repo, "limit_resumed", "tokenize")
        assert datetime.fromisoformat(resumed["ts"]) >= until - timedelta(seconds=1)
    st = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert st.phase == Phase.INTEGRATED and st.relaunches == 1 and st.rework_count == 0
    assert not ledger(demo_files.repo, "task_failed") and not ledger(demo_files.repo, "nudged")


#: the attack: erase every transcript the session can reach (its own among them)
TRUNCATE = 'for f in "${CLAUDE_CONFIG_DIR:-$HOME/.claude}"/projects/*/*.jsonl; do : > "$f"; done'


def test_an_agent_that_truncates_its_transcript_is_still_blocked_by_its_budget(
    demo_files: demo.DemoFiles,
) -> None:
    """The session empties its own transcript just before its turn ends, to look cheap
    there. lo-orch's spend book read every message before the tool that erased them
    ran (PreToolUse): the spend is exactly what the endpoint reported, the task is stopped
    by its budget, and the ledger names the tampering."""
    only(demo_files, "tokenize")

    def erase_then_stop(script: dict[str, Any]) -> None:
        # erase, then end the turn before signalling (the turn boundary where budgets bite)
        actions = script["tokenize"]["implement"][0]
        actions[len(actions) - 1 : len(actions) - 1] = [
            {"run": {"argv": ["sh", "-c", TRUNCATE]}},
            {"stop": {"text": "Almost there."}},
        ]

    edit_script(demo_files, erase_then_stop)
    with cached_endpoint(demo_files) as endpoint:
        settings = claude_settings(endpoint)
        approve(demo_files, settings)

        def set_budget(stop: threading.Event) -> None:
            # once planning is paid for (two replies): a budget of twice that, which the
            # implementation turn (six replies) exceeds and the one reply left in the
            # emptied transcript does not
            until_implementing(endpoint)
            planned = sum(
                OPUS.cost(r["usage"])
                for r in endpoint.logged(kind="reply", task="tokenize", prompt_kind="plan")
            )
            settings.run.task_max_cost_usd = 2 * planned

        outcome = supervise_beside(demo_files.repo, settings, set_budget)
        assert outcome.state == "blocked", outcome.message
        figures = sent(endpoint, "tokenize")
    cap = settings.run.task_max_cost_usd
    assert cap is not None
    st = Store(RunDir(demo_files.repo)).read_status("tokenize")
    assert st.phase == Phase.BLOCKED and st.error is not None
    assert st.error.startswith("over its budget: spent $"), st.error
    assert st.usage is not None
    # every token the endpoint reported, to the unit: nothing was lost to the truncation
    assert {k: st.usage[k] for k in KEYS} == figures
    assert st.usage["cost_usd"] >= cap
    assert any("transcript tampered with" in n for n in st.usage["notes"]), st.usage
    (tampered, *_) = ledger(demo_files.repo, "transcript_tampered", "tokenize")
    assert "shrank" in tampered["message"], tampered
    # the attack was real: what the transcript holds now is under the budget
    assert st.session_id is not None and st.worktree is not None
    left = usage.session_usage(
        Path(st.worktree),
        st.session_id,
        {**__import__("os").environ, **settings.agent.env},
        usage.DEFAULT_PRICES,
    )
    assert left.cost_usd is not None and left.cost_usd < cap, (left.cost_usd, cap)


def test_concurrency_drops_after_repeated_rate_limits_and_recovers(
    demo_files: demo.DemoFiles,
) -> None:
    """Two sessions get a 429 each: the run lowers its concurrency (2 -> 1), so the task
    that becomes ready meanwhile waits for a free slot, and raises it again after a quiet
    period (shortened to 12 s)."""
    only(demo_files, "tokenize", "slug", "counts")
    _set_plan(demo_files, lambda p: p.update(concurrency=2))
    # counts works until the slot has come back (the ledger says so), so the run is still
    # going then, however fast the machine is (a fixed sleep as long as the quiet period
    # was mostly spent after the slot came back). The pattern does not match its own text:
    # the ledger's PreToolUse line holds the command, and a plain `concurrency_raised` there
    # ended the wait at once whenever counts started before the slot came back
    slot_back = (
        f"until grep -q 'concurrency_[r]aised' {RunDir(demo_files.repo).ledger}; do sleep 0.2; done"
    )
    edit_script(
        demo_files,
        lambda d: d["counts"]["implement"][0].insert(0, {"run": {"argv": ["sh", "-c", slot_back]}}),
    )
    with cached_endpoint(demo_files) as endpoint:
        settings = claude_settings(endpoint)
        settings.run.limit_wait_seconds = 3
        settings.run.limit_quiet_seconds = 12
        approve(demo_files, settings)

        # the first turn request of each session is refused: both sessions are launched
        # at once (concurrency 2), so both hits come before anything else can happen
        for task in ("tokenize", "slug"):
            endpoint.fail(429, times=1, task=task, retry_after=120)
        outcome = Supervisor(demo_files.repo, settings).run()
        assert outcome.state == "review", outcome.message
    hits = ledger(demo_files.repo, "limit_hit")
    assert sorted(h["task"] for h in hits) == ["slug", "tokenize"], hits
    (lowered,) = ledger(demo_files.repo, "concurrency_lowered")
    assert lowered["concurrency"] == 1
    second_hit = max(datetime.fromisoformat(h["ts"]) for h in hits)
    lowered_at = datetime.fromisoformat(lowered["ts"])
    assert lowered_at >= second_hit - timedelta(seconds=1)
    (raised,) = ledger(demo_files.repo, "concurrency_raised")
    assert raised["concurrency"] == 2
    raised_at = datetime.fromisoformat(raised["ts"])
    assert raised_at - lowered_at >= timedelta(seconds=12), (lowered_at, raised_at)
    # while one slot was allowed, counts was not launched beside a working session: it
    # started after slug was done, or after the slot came back
    (counts,) = ledger(demo_files.repo, "task_released", "counts")
    (slug_done,) = ledger(demo_files.repo, "task_integrated", "slug")
    released = datetime.fromisoformat(counts["ts"])
    assert released >= min(raised_at, datetime.fromisoformat(slug_done["ts"])), (
        released,
        raised_at,
        slug_done["ts"],
    )
    for task in ("tokenize", "slug", "counts"):  # (counts' first round fails by design)
        st = Store(RunDir(demo_files.repo)).read_status(task)
        assert st.phase == Phase.INTEGRATED, (task, st.phase)
        assert task == "counts" or (st.rework_count == 0 and not st.nudged), task
