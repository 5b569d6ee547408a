"""The one way a test waits: poll a predicate until it holds or fail naming what it
waited for. Every test waits through ``wait_for`` (an app under textual's pilot through
``wait_in_app``, same arguments after the pilot); tests/test_layout.py fails on a second
helper, a deadline loop written out in a test, or the package's ``wait_until`` used bare."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

INTERVAL = 0.1


def _timed_out(timeout: float, what: str, shown: Callable[[], str] | None) -> AssertionError:
    seen = f"; it shows:\n{shown()}" if shown else ""
    return AssertionError(f"timed out after {timeout:g}s waiting for {what}{seen}")


def wait_for(
    pred: Callable[[], object],
    timeout: float,
    what: str,
    *,
    interval: float = INTERVAL,
    shown: Callable[[], str] | None = None,
) -> None:
    """Wait until ``pred()`` is true (polled every ``interval`` s); fail the test naming
    ``what`` (and what ``shown()`` gives) after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, shown)
        time.sleep(interval)


async def wait_in_app(
    pilot: Any,
    pred: Callable[[], object],
    timeout: float,
    what: str,
    *,
    shown: Callable[[], str] | None = None,
) -> None:
    """``wait_for`` inside a textual app: the app's own loop keeps running meanwhile."""
    deadline = time.monotonic() + timeout
    while not pred():
        if time.monotonic() > deadline:
            raise _timed_out(timeout, what, shown)
        await pilot.pause(INTERVAL)
