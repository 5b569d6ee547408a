"""Rate and usage limits: what Claude Code's screen says about when a limit resets.

Claude Code 2.1.332 (see the reference notes) gives up on a turn after repeated 429 /
overloaded answers, or at once on a subscriber's usage limit, and says so with a
``StopFailure`` hook (``error``: ``rate_limit`` or ``server_error``). A usage limit's screen
line names its reset time: ``You've hit your 5-hour limit · resets 2:11am (UTC)``. The
supervisor parks such a session (``waiting_limit``, not a stall, not a failure) and resumes
it after the reset, or after ``[run] limit_wait_seconds`` for a plain rate limit.

Module API: ``usage_limit_reset(screen, now)``, ``Governor`` (concurrency under 429s).
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta

#: "resets 2:11am (UTC)", "resets 11pm (UTC)", "resets 14:05 (UTC)"
_RESET_RE = re.compile(
    r"limit\b.{0,80}?\bresets\s+(\d{1,2})(?::(\d{2}))?\s*(am|pm)?\s*\(UTC\)", re.IGNORECASE)


def usage_limit_reset(screen: str, now: datetime) -> datetime | None:
    """The next UTC time the usage limit on ``screen`` resets (None: no such message, or a
    reset time in another zone than UTC, which lo-orch does not guess)."""
    matches = list(_RESET_RE.finditer(screen))
    if not matches:
        return None
    found = matches[-1]  # the last message on screen is the current one
    hour, minute = int(found.group(1)), int(found.group(2) or 0)
    half = (found.group(3) or "").lower()
    if half:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if half == "pm" else 0)
    if hour > 23 or minute > 59:
        return None
    now = now.astimezone(UTC)
    reset = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
    if reset <= now:
        reset += timedelta(days=1)
    return reset


class Governor:
    """Concurrency under rate limits: one slot less after each ``hits_to_lower`` limit hits
    within ``window`` seconds (never below 1), one slot more after ``quiet`` seconds
    without a hit (never above the configured cap)."""

    def __init__(self, cap: int, *, hits_to_lower: int = 2, window: float = 300.0,
                 quiet: float = 600.0) -> None:
        self.cap = cap
        self.current = cap
        self.hits_to_lower = hits_to_lower
        self.window = window
        self.quiet = quiet
        self.hits: list[float] = []
        self.changed_at = 0.0

    def hit(self, now: float) -> int:
        """A limit hit at ``now``; the concurrency to use."""
        self.hits = [t for t in self.hits if now - t < self.window] + [now]
        if len(self.hits) >= self.hits_to_lower and self.current > 1:
            self.current -= 1
            self.hits = []
            self.changed_at = now
        return self.current

    def tick(self, now: float) -> int:
        """The concurrency to use at ``now`` (raised again after a quiet period)."""
        last = max([*self.hits, self.changed_at])
        if self.current < self.cap and now - last >= self.quiet:
            self.current += 1
            self.changed_at = now
        return self.current
