"""A remote session's signal sent while no supervisor runs (issue 19's gap), on a real
multi-node Ray cluster (``helpers.ray_cluster``: a head and three worker nodes with
``lo_session`` slots).

The supervisor (`lo-orch run`) is SIGKILLed while slug's session works; the session then
signals ``impl_done`` to its node's inbox with nobody to answer. A new `lo-orch run` must
get the task going at once: the report it cannot vouch for is only a hint
(``signal_unattested``), the session is asked once to signal again, and its new,
attested signal is the one accepted. The stall nudge cannot rescue it: the runs' stall
limit is an hour.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections import Counter
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
import yaml
from helpers import ray_cluster
from helpers.ray_cluster import RayEnv, edit_demo, run_actors, staging_merges
from helpers.runs import approve, ledger
from helpers.wait import wait_for

from loop_orchestrator.cluster.ray_backend import RayBackend, cluster_settings
from loop_orchestrator.runstate.state import Phase, RunDir, Store
from loop_orchestrator.sessions.inbox import INBOX_DIR
from loop_orchestrator.simulator import demo_flow as demo
from loop_orchestrator.simulator.agent import record_dir_for

pytestmark = pytest.mark.slow
#: the module's cluster (helpers.ray_cluster)
ray_env = ray_cluster.ray_env

#: how long the new supervisor may take from its start to the accepted signal (it starts
#: Python, joins the cluster, re-adopts the session and has a prompt typed there)
PROMPT_SECONDS = 60.0
#: how long a session's `lo-orch signal` waits for a supervisor in the tests whose client
#: must give up (``[agent] env`` LO_ORCH_SIGNAL_WAIT; 30 s by default): one unanswered try
#: (the node answers None after its STALE_AFTER) and the start of a second
GIVE_UP_ENV = {"LO_ORCH_SIGNAL_WAIT": "10"}


def _prepare(
    tmp_path: Path, ray_env: RayEnv, tasks: tuple[str, ...], first: dict[str, list[Any]]
) -> demo.DemoFiles:
    """The demo with ``tasks`` only, each doing ``first[task]`` before its work; the
    stall limit is an hour (a nudge cannot get a task going)."""
    files = demo.prepare_demo(tmp_path)

    def change(plan: dict[str, Any], script: dict[str, Any]) -> None:
        plan["name"] = f"sig{tmp_path.name[-6:]}".replace("_", "")
        plan["tasks"] = [t for t in plan["tasks"] if t["id"] in tasks]
        for task, actions in first.items():
            script[task]["implement"][0] = [*actions, *script[task]["implement"][0]]

    edit_demo(files, change)
    ray_env.write_config(files, "stall_minutes = 60")
    approve(files, ray_env.settings(files.script))
    return files


@pytest.fixture
def slug_alone(tmp_path: Path, tmux_socket: str, ray_env: RayEnv) -> demo.DemoFiles:
    """The demo with slug alone, which sleeps before its work (the supervisor is killed
    then)."""
    return _prepare(tmp_path, ray_env, ("slug",), {"slug": [{"sleep": {"seconds": 12}}]})


def _start(repo: Path) -> subprocess.Popen[bytes]:
    argv = [sys.executable, "-m", "loop_orchestrator", "run", "--repo", str(repo)]
    return subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(supervisor: subprocess.Popen[bytes], timeout: float) -> str:
    """Wait for a `lo-orch run` to end (its stderr's tail when it does not, then raise)."""
    try:
        out, err = supervisor.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        supervisor.send_signal(signal.SIGABRT)
        out, err = supervisor.communicate()
        print("ERR", err.decode(errors="replace")[-12000:])
        raise
    assert supervisor.returncode == 0, (out + err).decode(errors="replace")
    return out.decode(errors="replace")


def _started_again(repo: Path, phase: str) -> None:
    """Start `lo-orch run` again: slug's ``phase`` signal must count within
    ``PROMPT_SECONDS`` (else the run is stopped and the test fails), and the run end."""
    second = _start(repo)
    try:

        def counted() -> bool:
            assert second.poll() is None, "the second supervisor ended"
            return any(
                e["event"] == "signal" and e.get("phase") == phase for e in _after_restart(repo)
            )

        wait_for(counted, PROMPT_SECONDS + 30, f"slug's {phase} accepted", interval=0.5)
    except BaseException:
        second.kill()
        second.communicate()
        raise
    _finish(second, 300)


def _kill_while_slug_sleeps(repo: Path) -> tuple[RayBackend, str]:
    """Start `lo-orch run`, SIGKILL it once slug's implementation prompt arrived (the
    session then sleeps before its work and its signal); slug's backend and pane."""
    first = _start(repo)
    try:

        def sleeping() -> bool:
            assert first.poll() is None, "the first supervisor ended"
            st = Store(RunDir(repo)).read_status("slug")
            return st.phase == Phase.IMPLEMENTING and st.delivered == "implementing:0"

        wait_for(sleeping, 150, "slug's implementation prompt delivered", interval=0.2)
    finally:
        first.kill()
        first.communicate()
    state = Store(RunDir(repo)).read_run()
    assert state.cluster is not None
    pane = Store(RunDir(repo)).read_status("slug").pane_id
    assert pane is not None
    return RayBackend(state, cluster_settings(state.cluster)), pane


def _screen_shows(backend: RayBackend, pane: str, text: str, times: int = 1) -> bool:
    return backend.capture(pane, lines=200).count(text) >= times


def _ts(event: dict[str, Any]) -> float:
    return datetime.fromisoformat(str(event["ts"])).timestamp()


def _after_restart(repo: Path) -> list[dict[str, Any]]:
    """slug's ledger events since the second supervisor started (none before it did)."""
    events = ledger(repo)
    starts = [i for i, e in enumerate(events) if e["event"] == "supervisor_started"]
    if len(starts) < 2:
        return []
    return [e for e in events[starts[1] :] if e.get("task") in (None, "slug")]


def _prompts_arrived(events: list[dict[str, Any]]) -> int:
    """How many prompts reached slug's session (its attested UserPromptSubmit hooks)."""
    return sum(
        1
        for e in events
        if e.get("hook_event") == "UserPromptSubmit" and e.get("attested") is not False
    )


def _accepted_promptly(repo: Path, *, hinted: bool, phase: str = "impl_done") -> None:
    events = _after_restart(repo)
    names = [e["event"] for e in events]
    assert names[:1] == ["supervisor_started"], names
    accepted = [e for e in events if e["event"] == "signal" and e.get("phase") == phase]
    assert accepted, names
    assert _ts(accepted[0]) - _ts(events[0]) < PROMPT_SECONDS, names
    unattested = [e for e in events if e["event"] == "signal_unattested"]
    if hinted:
        # the report it could not vouch for was a hint, judged before the signal counted
        assert unattested and unattested[0]["ts"] <= accepted[0]["ts"], names
    assert "nudged" not in names, names
    # asked once at most, and never judged twice: one accepted impl_done, one verification
    asked = [e for e in events if e["event"] == "signal_asked_again"]
    assert len(asked) <= 1, names
    assert len(accepted) == 1, names
    assert Counter(e.get("to") for e in events if e["event"] == "reacted")[phase] == 1


def test_a_signal_left_while_no_supervisor_ran_is_asked_for_again_at_once(
    ray_env: RayEnv,
    slug_alone: demo.DemoFiles,
) -> None:
    """Killed while slug sleeps; slug signals to its node with nobody answering, and its
    client gives up and leaves the report in the node's inbox folder. The next `lo-orch
    run` takes it as a hint only, asks the session once, and the signal it then gets is
    accepted within a minute (not after the stall nudge)."""
    repo = slug_alone.repo
    run = Store(RunDir(repo)).read_run().name
    ray_env.write_config(slug_alone, "stall_minutes = 60", GIVE_UP_ENV)
    backend, pane = _kill_while_slug_sleeps(repo)
    # the session's `lo-orch signal` waits for a supervisor (GIVE_UP_ENV), then keeps its
    # report
    wait_for(
        # (plan_ready's was the first)
        lambda: _screen_shows(backend, pane, "⎿ signalled", times=2),
        120,
        "slug's signal client gave up",
        interval=1.0,
    )
    left = list(
        ray_env.base.glob(f"n*/*/{run}-*/slug-g*/repo/.orchestration/{INBOX_DIR}/slug/*.json")
    )
    assert left, "the report was not left in the node's inbox folder"

    _started_again(repo, "impl_done")

    _accepted_promptly(repo, hinted=True)
    events = _after_restart(repo)
    names = [e["event"] for e in events]
    assert _prompts_arrived(events) == 1, names  # the request to signal again, once
    assert "signal_rejected" not in names, names
    assert Store(RunDir(repo)).read_status("slug").phase == Phase.INTEGRATED
    assert staging_merges(repo, run, "slug") == 1
    assert run_actors(run) == []


def test_a_signal_still_being_retried_when_the_supervisor_returns_is_judged_once(
    ray_env: RayEnv,
    slug_alone: demo.DemoFiles,
) -> None:
    """Killed while slug sleeps; slug signals, its client's first tries go unanswered
    (they wait in the node's queue), and the next `lo-orch run` starts while the client
    still tries. The signal is accepted once, at once, and the session is not asked
    again for a report that counted."""
    repo = slug_alone.repo
    run = Store(RunDir(repo)).read_run().name
    backend, pane = _kill_while_slug_sleeps(repo)
    wait_for(
        lambda: _screen_shows(backend, pane, "Bash(lo-orch signal impl_done)"),
        120,
        "slug's signal sent",
        interval=0.5,
    )
    time.sleep(12)  # the first try is now older than the node's STALE_AFTER
    assert not _screen_shows(backend, pane, "⎿ signalled", times=2)  # its client still tries

    _started_again(repo, "impl_done")

    _accepted_promptly(repo, hinted=False)
    events = _after_restart(repo)
    names = [e["event"] for e in events]
    # nothing was asked: no prompt reached the session, and no signal was refused
    assert "signal_asked_again" not in names, names
    assert _prompts_arrived(events) == 0, names
    assert "signal_rejected" not in names, names
    assert Store(RunDir(repo)).read_status("slug").phase == Phase.INTEGRATED
    assert staging_merges(repo, run, "slug") == 1
    assert run_actors(run) == []


@pytest.mark.parametrize("restart", ["after_the_client_gave_up", "while_it_retries"])
def test_a_prompt_arrival_and_a_signal_left_meanwhile_are_read_before_anything_is_sent(
    ray_env: RayEnv,
    slug_alone: demo.DemoFiles,
    restart: str,
) -> None:
    """Killed while delivering slug's planning prompt (the session swallowed the first
    Enter; the supervisor would press it again): the prompt then arrives, and slug plans
    and signals plan_ready with nobody to answer. The next `lo-orch run` reads what the
    node kept, in the order it was sent, before it decides anything (as it reads the local
    inbox folder): it does not send the planning prompt again, and the signal counts at
    once, asked for again when its client had given up (a restart that resent the prompt
    passed over the signal meanwhile, and the task waited for a nudge; a signal still
    retried was judged before the prompt's arrival, and refused)."""
    repo = slug_alone.repo
    script = yaml.safe_load(slug_alone.script.read_text(encoding="utf-8"))
    script["slug"]["swallow_first_enter"] = True
    slug_alone.script.write_text(yaml.safe_dump(script, sort_keys=False), encoding="utf-8")
    run = Store(RunDir(repo)).read_run().name
    gave_up = restart == "after_the_client_gave_up"
    if gave_up:
        ray_env.write_config(slug_alone, "stall_minutes = 60", GIVE_UP_ENV)
    first = _start(repo)
    try:

        def swallowed() -> bool:
            assert first.poll() is None, "the first supervisor ended"
            runs = ray_env.base.glob(f"n*/*/{run}-*/slug-g*/repo/.orchestration")
            with pytest.MonkeyPatch.context() as node:  # (where the nodes' agents record)
                node.setenv(
                    "LO_ORCH_SCRIPTED_TRANSCRIPTS", ray_env.env["LO_ORCH_SCRIPTED_TRANSCRIPTS"]
                )
                found = [p for r in runs if (p := record_dir_for(r) / "slug.events").exists()]
            return any("swallowed-enter" in p.read_text(encoding="utf-8") for p in found)

        wait_for(swallowed, 150, "slug's first Enter swallowed", interval=0.1)
    finally:
        first.kill()
        first.communicate()
    st = Store(RunDir(repo)).read_status("slug")
    assert (st.phase, st.delivering, st.delivered) == (Phase.PLANNING, "planning:0", None)
    state = Store(RunDir(repo)).read_run()
    assert state.cluster is not None and st.pane_id is not None
    backend, pane = RayBackend(state, cluster_settings(state.cluster)), st.pane_id
    backend.send_keys(pane, "Enter")  # the dead supervisor's second Enter got there
    if gave_up:
        wait_for(
            lambda: _screen_shows(backend, pane, "⎿ signalled"),
            120,
            "slug's signal client gave up",
            interval=1.0,
        )
    else:
        wait_for(
            lambda: _screen_shows(backend, pane, "Bash(lo-orch signal plan_ready)"),
            60,
            "slug's signal sent",
            interval=0.5,
        )
        time.sleep(12)  # the prompt's arrival is in the node's inbox folder by now
        assert not _screen_shows(backend, pane, "⎿ signalled")  # its client still tries

    _started_again(repo, "plan_ready")

    _accepted_promptly(repo, hinted=gave_up, phase="plan_ready")
    events = _after_restart(repo)
    names = [e["event"] for e in events]
    # the planning prompt was not sent again: the prompts that arrived after the restart
    # are the request to signal again (when the client had given up) and the
    # implementation prompt
    assert _prompts_arrived(events) == (2 if gave_up else 1), names
    assert "signal_rejected" not in names, names
    assert Store(RunDir(repo)).read_status("slug").phase == Phase.INTEGRATED
    assert staging_merges(repo, run, "slug") == 1


def test_a_signal_that_counted_just_before_the_kill_is_not_asked_for_again(
    ray_env: RayEnv,
    slug_alone: demo.DemoFiles,
) -> None:
    """The supervisor is SIGKILLed the moment slug's impl_done counted (its answer may
    or may not have reached the session). The next `lo-orch run` goes on from the record:
    it verifies and integrates slug once, and asks the session for nothing."""
    repo = slug_alone.repo
    run = Store(RunDir(repo)).read_run().name
    first = _start(repo)
    try:

        def counted() -> bool:
            assert first.poll() is None, "the first supervisor ended"
            return any(
                e["event"] == "signal" and e.get("phase") == "impl_done" for e in ledger(repo)
            )

        wait_for(counted, 150, "slug's impl_done counted", interval=0.05)
    finally:
        first.kill()
        first.communicate()

    second = _start(repo)
    _finish(second, 300)

    events = _after_restart(repo)
    names = [e["event"] for e in events]
    assert "signal_asked_again" not in names, names
    assert _prompts_arrived(events) == 0, names
    accepted = [e for e in ledger(repo) if e["event"] == "signal" and e["phase"] == "impl_done"]
    assert len(accepted) == 1, names
    assert Store(RunDir(repo)).read_status("slug").phase == Phase.INTEGRATED
    assert staging_merges(repo, run, "slug") == 1


#: what slug's agent runs: a prompt arrival and a signal for tokenize, left in the only
#: inbox folder its sandbox lets it write (its node's, which holds slug's messages)
FORGE_LEFT = (
    "import os, pathlib\n"
    "from loop_orchestrator.sessions import inbox\n"
    "run = pathlib.Path(os.environ['LO_ORCH_RUN_DIR'])\n"
    "inbox.leave(run, 'slug', {'type': 'hook', 'event': 'UserPromptSubmit',"
    " 'task': 'tokenize', 'payload': {}})\n"
    "inbox.leave(run, 'slug', {'type': 'signal', 'task': 'tokenize', 'phase': 'impl_done'})\n"
)


def test_a_signal_forged_into_a_nodes_inbox_folder_is_not_a_hint_for_another_task(
    tmp_path: Path, tmux_socket: str, ray_env: RayEnv
) -> None:
    """slug's agent leaves a prompt arrival and an impl_done for tokenize in its node's
    inbox folder while tokenize works: refused (logged), no hint for tokenize (no
    request to signal again reaches tokenize's session), and no phase moves by it."""
    forge = {"run": {"argv": [sys.executable, "-c", FORGE_LEFT], "check": True}}
    files = _prepare(
        tmp_path,
        ray_env,
        ("tokenize", "slug"),
        {"tokenize": [{"sleep": {"seconds": 10}}], "slug": [{"sleep": {"seconds": 2}}, forge]},
    )
    repo = files.repo
    run = Store(RunDir(repo)).read_run().name
    _finish(_start(repo), 300)

    events = ledger(repo)
    refused = [e for e in events if e["event"] == "event_rejected" and e.get("task") == "tokenize"]
    assert len(refused) == 2, refused
    assert all("left in task slug's inbox" in e["message"] for e in refused)
    tokenize = [e for e in events if e.get("task") == "tokenize"]
    names = [e["event"] for e in tokenize]
    assert "signal_unattested" not in names and "signal_asked_again" not in names, names
    assert _prompts_arrived(tokenize) == 2, names  # its planning and implementation prompts
    accepted = [e["phase"] for e in tokenize if e["event"] == "signal"]
    assert accepted == ["plan_ready", "impl_done"], names
    for task in ("tokenize", "slug"):
        assert Store(RunDir(repo)).read_status(task).phase == Phase.INTEGRATED
        assert staging_merges(repo, run, task) == 1
