"""Usage-limit reset times as Claude Code 2.1.332 writes them, in any time zone.

Every message below is one the real CLI printed (``claude -p``, scripted endpoint answering
429 with ``anthropic-ratelimit-unified-status: rejected``, the session's ``TZ`` as named):
the minutes are cut off, the day is named only when the reset is not within a day.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from loop_orchestrator.cost.limits import usage_limit_reset

#: (the session's TZ, when it was said (UTC), the message, the reset the endpoint sent (UTC));
#: the minutes are as measured, the seconds as near as the run's log gave them
REAL = [
    (
        "UTC",
        datetime(2026, 11, 30, 9, 55, 51, tzinfo=UTC),
        "You've hit your 5-hour limit · resets 10:55am (UTC)",
        datetime(2026, 11, 30, 10, 55, 51, tzinfo=UTC),
    ),
    (
        "America/New_York",
        datetime(2026, 11, 30, 9, 55, 3, tzinfo=UTC),
        "You've hit your 5-hour limit · resets 5:55am (America/New_York)",
        datetime(2026, 11, 30, 10, 55, 3, tzinfo=UTC),
    ),
    (
        "America/New_York",
        datetime(2026, 11, 30, 9, 55, 10, tzinfo=UTC),
        "You've hit your 5-hour limit · resets Dec 2, 12:28pm (America/New_York)",
        datetime(2026, 12, 2, 17, 28, 30, tzinfo=UTC),
    ),
    (
        "Asia/Kolkata",
        datetime(2026, 11, 30, 9, 55, 17, tzinfo=UTC),
        "You've hit your 5-hour limit · resets 4:25pm (Asia/Kolkata)",
        datetime(2026, 11, 30, 10, 55, 17, tzinfo=UTC),
    ),
    (
        "Asia/Kolkata",
        datetime(2026, 11, 30, 9, 55, 24, tzinfo=UTC),
        "You've hit your 5-hour limit · resets Dec 2, 10:58pm (Asia/Kolkata)",
        datetime(2026, 12, 2, 17, 28, 44, tzinfo=UTC),
    ),
    (
        "Europe/Berlin",
        datetime(2026, 11, 30, 9, 55, 31, tzinfo=UTC),
        "You've hit your 5-hour limit · resets 11:55am (Europe/Berlin)",
        datetime(2026, 11, 30, 10, 55, 31, tzinfo=UTC),
    ),
    (
        "Europe/Berlin",
        datetime(2026, 11, 30, 9, 55, 38, tzinfo=UTC),
        "You've hit your 5-hour limit · resets Dec 2, 6:29pm (Europe/Berlin)",
        datetime(2026, 12, 2, 17, 29, 58, tzinfo=UTC),
    ),
    (
        "Australia/Adelaide",
        datetime(2026, 11, 30, 9, 55, 44, tzinfo=UTC),
        "You've hit your 5-hour limit · resets 9:25pm (Australia/Adelaide)",
        datetime(2026, 11, 30, 10, 55, 44, tzinfo=UTC),
    ),
    (
        "Australia/Adelaide",
        datetime(2026, 11, 30, 9, 55, 51, tzinfo=UTC),
        "You've hit your 5-hour limit · resets Dec 3, 3:59am (Australia/Adelaide)",
        datetime(2026, 12, 2, 17, 29, 11, tzinfo=UTC),
    ),
]


@pytest.mark.parametrize(
    ("zone", "now", "message", "sent"), REAL, ids=[f"{z}-{m[-30:]}" for z, _, m, _ in REAL]
)
def test_each_real_message_gives_the_reset_the_endpoint_sent(
    zone: str, now: datetime, message: str, sent: datetime
) -> None:
    got = usage_limit_reset(message, now)
    assert got is not None, message
    # the minute the endpoint's reset falls in, exactly (Claude Code cuts the seconds)
    assert got == sent.replace(second=0), (zone, got, sent)


def test_a_reset_in_the_minute_said_is_now_not_tomorrow() -> None:
    # said at 10:55:40 for a reset at 10:55:50: "resets 10:55am" is not tomorrow's 10:55
    now = datetime(2026, 11, 30, 10, 55, 40, tzinfo=UTC)
    got = usage_limit_reset("You've hit your 5-hour limit · resets 10:55am (UTC)", now)
    assert got == datetime(2026, 11, 30, 10, 55, tzinfo=UTC)
    # well past: tomorrow's
    later = now + timedelta(minutes=10)
    assert usage_limit_reset("limit · resets 10:55am (UTC)", later) == datetime(
        2026, 12, 1, 10, 55, tzinfo=UTC
    )


def test_a_zone_with_a_daylight_saving_change_and_the_year_end() -> None:
    # 2026-03-29 02:00 Europe/Berlin moves to 03:00 (UTC+2): "resets 9:00am" said late on
    # the 28th is 07:00 UTC on the 29th, not 08:00
    now = datetime(2026, 3, 28, 22, 0, tzinfo=UTC)
    got = usage_limit_reset("limit · resets 9am (Europe/Berlin)", now)
    assert got == datetime(2026, 3, 29, 7, 0, tzinfo=UTC)
    # "Jan 2" said on Dec 30 is next year's
    now = datetime(2026, 12, 30, 12, 0, tzinfo=UTC)
    got = usage_limit_reset("You've hit your weekly limit · resets Jan 2, 9am (UTC)", now)
    assert got == datetime(2027, 1, 2, 9, 0, tzinfo=UTC)


@pytest.mark.parametrize(
    "text",
    [
        "You've hit your 5-hour limit · resets 2:11am (Mars/Olympus)",  # unknown zone
        "You've hit your 5-hour limit · resets Feb 30, 2am (UTC)",  # no such day
        "You've hit your 5-hour limit · resets Foo 3, 2am (UTC)",  # no such month
        "You've hit your 5-hour limit · resets 0am (UTC)",
        "You've hit your 5-hour limit · resets 10:75am (UTC)",
        "API Error: Request rejected (429) · This request would exceed your account's rate "
        "limit. Please try again later.",  # an API-key login: a plain rate limit, no reset
        "",
    ],
)
def test_no_reset_time_is_guessed(text: str) -> None:
    assert usage_limit_reset(text, datetime(2026, 11, 30, 9, 0, tzinfo=UTC)) is None
