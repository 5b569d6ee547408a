"""Owned-path patterns: matching a path, and whether two patterns can match one path.

Patterns are repo-relative globs where ``*``, ``?`` and ``[...]`` stay inside one path
segment and ``**`` spans any number of segments; a trailing ``/`` means the whole folder.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Sequence


def _norm(pattern: str) -> str:
    p = pattern.replace("\\", "/").strip()
    if p.startswith("./"):
        p = p[2:]
    if p.endswith("/"):
        p += "**"
    return p


def path_matches(path: str, patterns: Sequence[str]) -> bool:
    """Whether a repo-relative path is matched by any owns pattern (``**`` spans folders)."""
    segs = _norm(path).split("/")
    return any(_match_segs(segs, _norm(p).split("/")) for p in patterns)


def _match_segs(path: Sequence[str], pat: Sequence[str]) -> bool:
    if not pat:
        return not path
    head = pat[0]
    if head == "**":
        return any(_match_segs(path[i:], pat[1:]) for i in range(len(path) + 1))
    if not path:
        return False
    return fnmatch.fnmatchcase(path[0], head) and _match_segs(path[1:], pat[1:])


_WILD = re.compile(r"[*?\[]")


def _seg_overlap(a: str, b: str) -> bool:
    """Whether some single path segment matches both segment patterns (conservative)."""
    a_wild, b_wild = bool(_WILD.search(a)), bool(_WILD.search(b))
    if not a_wild and not b_wild:
        return a == b
    if not a_wild:
        return fnmatch.fnmatchcase(a, b)
    if not b_wild:
        return fnmatch.fnmatchcase(b, a)
    # Both wild: compatible literal prefixes and suffixes (may over-report, never miss
    # the common cases like `*.py` vs `test_*`).
    pa, pb = _WILD.split(a)[0], _WILD.split(b)[0]
    sa, sb = _WILD.split(a)[-1], _WILD.split(b)[-1]
    return (pa.startswith(pb) or pb.startswith(pa)) and (sa.endswith(sb) or sb.endswith(sa))


def patterns_overlap(a: str, b: str) -> bool:
    """Whether some path could be matched by both owns patterns."""
    return _overlap(tuple(_norm(a).split("/")), tuple(_norm(b).split("/")), {})


_Memo = dict[tuple[tuple[str, ...], tuple[str, ...]], bool]


def _overlap(a: tuple[str, ...], b: tuple[str, ...], memo: _Memo) -> bool:
    key = (a, b)
    if key in memo:
        return memo[key]
    if not a or not b:
        result = (not a or all(s == "**" for s in a)) and (not b or all(s == "**" for s in b))
    elif a[0] == "**":
        result = _overlap(a[1:], b, memo) or _overlap(a, b[1:], memo)
    elif b[0] == "**":
        result = _overlap(a, b[1:], memo) or _overlap(a[1:], b, memo)
    else:
        result = _seg_overlap(a[0], b[0]) and _overlap(a[1:], b[1:], memo)
    memo[key] = result
    return result


def literal_prefix(pattern: str) -> tuple[str, ...]:
    """The path segments of an owns pattern before its first wildcard segment."""
    prefix: list[str] = []
    for seg in _norm(pattern).split("/"):
        if _WILD.search(seg):
            break
        prefix.append(seg)
    return tuple(prefix)
