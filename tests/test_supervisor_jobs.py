"""The supervisor's jobs: one step per task on a thread, errors routed, bugs kept (fast)."""

from __future__ import annotations

import threading

from loop_orchestrator.errors import LoOrchError
from loop_orchestrator.supervisor.jobs import Jobs


def test_an_error_a_person_can_act_on_goes_to_failed_a_bug_stays_with_its_job() -> None:
    wake = threading.Event()
    failed: list[tuple[str, str]] = []
    jobs = Jobs(3, wake, lambda task, exc: failed.append((task, exc.message)))
    release = threading.Event()

    def waits(_task: str) -> None:
        release.wait(5)

    def refuses(_task: str) -> None:
        raise LoOrchError("not logged in")

    def crashes(_task: str) -> None:
        raise KeyError("bug")

    jobs.submit("a", waits)
    assert "a" in jobs and jobs and jobs.unfinished() == ["a"]
    jobs.submit("b", refuses)
    jobs.submit("c", crashes)
    release.set()
    for fut in list(jobs.running.values()):
        fut.exception(timeout=10)  # (each ended; a failure of the step itself is kept)
    assert wake.is_set()
    assert failed == [("b", "not logged in")]
    ended = dict(jobs.done())
    assert set(ended) == {"a", "b", "c"}
    assert ended["a"] is None and ended["b"] is None
    assert isinstance(ended["c"], KeyError)
    assert not jobs and "a" not in jobs and jobs.done() == []
    jobs.shutdown()
