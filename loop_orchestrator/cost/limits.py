"""Rate and usage limits: what Claude Code says about when a limit resets.

Claude Code 2.1.332 (see the reference notes) gives up on a turn after repeated 429 /
overloaded answers, or at once on a usage limit, and says so with a ``StopFailure`` hook
(``error``: ``rate_limit`` or ``server_error``). A usage limit is Anthropic's 429 with the
unified rate-limit headers (``anthropic-ratelimit-unified-status: rejected``, ``-reset``: Unix
seconds, ``-representative-claim``: ``five_hour``...); for a subscriber or a gateway login
Claude Code then writes, in the hook's ``last_assistant_message`` and on screen, the reset
in the local time zone of the session (its ``TZ``), the minutes cut off (not rounded) and
the day only when it is not within the next day. Strings verified with the real CLI and
the scripted endpoint (``tests/test_limits.py``)::

    You've hit your 5-hour limit · resets 10:55am (UTC)
    You've hit your 5-hour limit · resets 4:25pm (Asia/Kolkata)
    You've hit your 5-hour limit · resets Dec 2, 12:28pm (America/New_York)

The supervisor parks such a session (``waiting_limit``, not a stall, not a failure) and
resumes it after the reset, or after ``[run] limit_wait_seconds`` for a plain rate limit.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
#: "limit · resets 2:11am (UTC)", "resets 11pm (Europe/Berlin)", "resets Dec 2, 14:05 (UTC)"
_RESET_RE = re.compile(
    r"limit\b.{0,80}?\bresets\s+(?:([A-Za-z]{3})[a-z]*\.?\s+(\d{1,2}),?\s+)?"
    r"(\d{1,2})(?::(\d{2}))?\s*(am|pm)?\s*\(([A-Za-z][A-Za-z0-9_+\-/]{0,63})\)",
    re.IGNORECASE,
)
#: a reset shown as a time already past by at most this much is the one just due (the
#: minutes are cut off, so "resets 10:55am" may be said at 10:55:40), not tomorrow's
_JUST_DUE = timedelta(minutes=5)


def _zone(name: str) -> tzinfo | None:
    if name.upper() in ("UTC", "ETC/UTC", "GMT", "Z"):
        return UTC
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        return None  # a zone this machine does not know: lo-orch does not guess


def usage_limit_reset(text: str, now: datetime) -> datetime | None:
    """When the usage limit the message in ``text`` names resets, in UTC (None: no such
    message, an impossible time, or a time zone this machine does not know).

    The last message in ``text`` counts (a screen may hold older ones). Without a day, the
    next such time in that zone (or one just past: see ``_JUST_DUE``); with a day, that day
    of the current year, or of the next one when it would lie months in the past.
    """
    matches = list(_RESET_RE.finditer(text))
    if not matches:
        return None
    found = matches[-1]
    mon, day, hour_s, minute_s, half, zone_name = found.groups()
    hour, minute = int(hour_s), int(minute_s or 0)
    if half:
        if not 1 <= hour <= 12:
            return None
        hour = hour % 12 + (12 if half.lower() == "pm" else 0)
    if hour > 23 or minute > 59:
        return None
    zone = _zone(zone_name)
    if zone is None:
        return None
    local_now = now.astimezone(zone)
    if mon is not None:
        if mon.lower() not in _MONTHS:
            return None
        month = _MONTHS.index(mon.lower()) + 1
        try:
            reset = datetime(local_now.year, month, int(day), hour, minute, tzinfo=zone)
            if reset < local_now - timedelta(days=180):  # "Jan 2" said on Dec 30
                reset = reset.replace(year=local_now.year + 1)
        except ValueError:  # "Feb 30"
            return None
        return reset.astimezone(UTC)
    reset = datetime(local_now.year, local_now.month, local_now.day, hour, minute, tzinfo=zone)
    if reset <= local_now - _JUST_DUE:
        # tomorrow's, by the calendar (a wall clock time, so right across a DST change)
        nxt = local_now.date() + timedelta(days=1)
        reset = datetime(nxt.year, nxt.month, nxt.day, hour, minute, tzinfo=zone)
    return reset.astimezone(UTC)


class Governor:
    """Concurrency under rate limits: one slot less after each ``hits_to_lower`` limit hits
    within ``window`` seconds (never below 1), one slot more after ``quiet`` seconds
    without a hit (never above the configured cap)."""

    def __init__(
        self, cap: int, *, hits_to_lower: int = 2, window: float = 300.0, quiet: float = 600.0
    ) -> None:
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
