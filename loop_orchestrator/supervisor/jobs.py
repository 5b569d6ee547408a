"""The supervisor's jobs: work that blocks (launching a session, delivering a prompt,
verifying, merging) runs in a small thread pool, at most one job per task."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

from loop_orchestrator.errors import LoOrchError

log = logging.getLogger(__name__)

Step = Callable[[str], None]


class Jobs:
    """At most one running step per task; an error a person can act on goes to ``failed``
    (on the job's thread), and the loop is woken after every step."""

    def __init__(
        self,
        workers: int,
        wake: threading.Event,
        failed: Callable[[str, LoOrchError], None],
    ) -> None:
        self.pool = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="lo-task")
        self.running: dict[str, Future[None]] = {}
        self.wake = wake
        self.failed = failed

    def __contains__(self, task: object) -> bool:
        return task in self.running

    def __bool__(self) -> bool:
        return bool(self.running)

    def submit(self, task: str, fn: Step) -> None:
        self.running[task] = self.pool.submit(self._guarded, task, fn)

    def _guarded(self, task: str, fn: Step) -> None:
        try:
            fn(task)
        except LoOrchError as exc:
            self.failed(task, exc)
        finally:
            self.wake.set()

    def done(self) -> list[tuple[str, BaseException | None]]:
        """The tasks whose step ended since the last call, each with the exception it
        raised (a bug: errors a person can act on went to ``failed``)."""
        ended = []
        for task, fut in list(self.running.items()):
            if fut.done():
                del self.running[task]
                ended.append((task, fut.exception()))
        return ended

    def unfinished(self) -> list[str]:
        return sorted(t for t, f in self.running.items() if not f.done())

    def shutdown(self) -> None:
        self.pool.shutdown(wait=True, cancel_futures=True)
