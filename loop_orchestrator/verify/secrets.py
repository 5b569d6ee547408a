"""Secrets and merge-conflict markers in added lines.

Provider patterns (AWS, private key blocks, GitHub, Slack, OpenAI, Anthropic, Google,
Stripe) block everywhere, test files included: a real-looking key in a fixture is still a
leak. Values that announce themselves as examples (``...EXAMPLE``, ``dummy``, ``fake``)
or are one repeated character are skipped. Generic ``password = "..."`` assignments block
in code and warn in tests. Long random-looking quoted strings (Shannon entropy) warn.

Secret *files* block by name (``secretfiles.is_secret_path``: SSH and PuTTY keys, .netrc,
.npmrc, .pypirc, key stores, kubeconfig, docker and AWS credentials, .env files...) and by
content (a cloud service-account JSON with its private key). Files git shows as binary (a
NUL byte, or ``binary`` in .gitattributes) have no added lines: their printable runs
(ASCII, and UTF-16LE as Windows tools write) are scanned with the provider patterns, so a
token cannot hide behind one NUL byte.

Conflict markers block. ``=======`` alone is also a Markdown/reST heading underline, so in
documentation files it counts only when ``<<<<<<<`` or ``>>>>>>>`` lines were added too.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Protocol

from loop_orchestrator.git.secretfiles import is_secret_path
from loop_orchestrator.verify import classify
from loop_orchestrator.verify.models import CheckId, Finding, blocking, warning

#: (check id suffix, what it is, pattern); group "key" is the secret when present
_PROVIDERS: tuple[tuple[CheckId, str, re.Pattern[str]], ...] = (
    (
        "secrets.private-key",
        "a private key block",
        re.compile(r"-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY(?: BLOCK)?-----"),
    ),
    (
        "secrets.aws",
        "an AWS access key id",
        re.compile(r"(?<![A-Z0-9])(?P<key>(?:AKIA|ASIA|ABIA|ACCA)[0-9A-Z]{16})(?![A-Z0-9])"),
    ),
    (
        "secrets.aws",
        "an AWS secret access key",
        re.compile(
            r"(?i)aws_?secret_?access_?key[\"']?\s*[:=]\s*[\"']?"
            r"(?P<key>[A-Za-z0-9/+=]{40})(?![A-Za-z0-9/+=])"
        ),
    ),
    (
        "secrets.github",
        "a GitHub token",
        re.compile(r"(?<![\w])(?P<key>gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})"),
    ),
    (
        "secrets.slack",
        "a Slack token",
        re.compile(r"(?<![\w])(?P<key>xox[baprse]-[A-Za-z0-9-]{10,})"),
    ),
    (
        "secrets.slack",
        "a Slack webhook URL",
        re.compile(
            r"(?P<key>https://hooks\.slack\.com/services/T[A-Za-z0-9_]+/B[A-Za-z0-9_]+/"
            r"[A-Za-z0-9_]+)"
        ),
    ),
    (
        "secrets.anthropic",
        "an Anthropic API key",
        re.compile(r"(?<![\w-])(?P<key>sk-ant-[A-Za-z0-9_-]{20,})"),
    ),
    (
        "secrets.openai",
        "an OpenAI API key",
        re.compile(r"(?<![\w-])(?P<key>sk-(?!ant-)(?:proj-|svcacct-|admin-)?[A-Za-z0-9_-]{20,})"),
    ),
    ("secrets.google", "a Google API key", re.compile(r"(?<![\w-])(?P<key>AIza[0-9A-Za-z_-]{35})")),
    (
        "secrets.stripe",
        "a Stripe live key",
        re.compile(r"(?<![\w])(?P<key>(?:sk|rk)_live_[0-9a-zA-Z]{20,})"),
    ),
    ("secrets.private-key", "a PuTTY private key", re.compile(r"PuTTY-User-Key-File-\d+:")),
    (
        "secrets.npm",
        "an npm registry token",
        re.compile(r"_authToken\s*=\s*(?P<key>[A-Za-z0-9_\-.]{20,})"),
    ),
    (
        "secrets.kubeconfig",
        "a Kubernetes client key",
        re.compile(r"client-key-data:\s*(?P<key>[A-Za-z0-9+/=]{40,})"),
    ),
)

_ASSIGNMENT = re.compile(
    r"(?i)(?P<name>[\w.-]*(?:password|passwd|pwd|secret|api[_-]?key|apikey|access[_-]?token"
    r"|auth[_-]?token|client[_-]?secret|private[_-]?key|secret[_-]?key|token))\b[\"']?"
    r"(?:\s*:\s*[\w\[\]|, .]+?)?\s*(?:=|:|:=|=>)\s*(?P<q>[\"'])(?P<value>[^\"'\s]{4,})(?P=q)"
)
_URL_CREDENTIALS = re.compile(r"[a-z][a-z0-9+.-]*://[^/\s:@'\"]+:(?P<value>[^/\s:@'\"]+)@")
ENTROPY_MIN_LENGTH = 24  # characters of a quoted string before its entropy is judged
_QUOTED = re.compile(rf"([\"'])(?P<value>[A-Za-z0-9+/=_\-]{{{ENTROPY_MIN_LENGTH},}})\1")
_PLACEHOLDER_VALUE = re.compile(
    r"(?i)^(?:<.*>|\$\{.*\}|\{\{.*\}\}|%\(?\w*\)?s|\*+|x+|\.+|your[_-].*|changeme|example.*"
    r"|dummy.*|fake.*|placeholder|redacted|none|null|password|secret|test|testing)$"
)
_EXAMPLE = re.compile(r"(?i)example|dummy|fake|sample|placeholder")

_CONFLICT = re.compile(r"^(?:<{7}|>{7}|\|{7})(?: |$)")
_CONFLICT_MID = re.compile(r"^={7}\s*$")

ENTROPY_THRESHOLD = 4.3  # bits per character; random base64 of this length is ~4.5+


def shannon_entropy(text: str) -> float:
    if not text:
        return 0.0
    counts = Counter(text)
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in counts.values())


def _looks_fake(value: str) -> bool:
    return bool(_EXAMPLE.search(value)) or len(set(value.split("_")[-1])) <= 2


def _mask(value: str) -> str:
    return value[:4] + "…" if len(value) > 6 else "…"


def check_secrets(added: Mapping[str, Sequence[tuple[int, str]]]) -> list[Finding]:
    """Secrets in the added lines of every changed file (``path -> [(line, text)]``)."""
    findings: list[Finding] = []
    for path, lines in added.items():
        test = classify.is_test_code(path)
        lock = classify.is_lock_file(path)
        for ln, text in lines:
            hit = _provider(path, ln, text)
            if hit:
                findings.append(hit)
                continue
            hit = _assignment(path, ln, text, test)
            if hit:
                findings.append(hit)
                continue
            if not lock and len(text) < 2000:
                hit = _entropy(path, ln, text)
                if hit:
                    findings.append(hit)
    return findings


_FIX = (
    "Remove it from the change, load it from the environment or a secret store, and "
    "rotate it if it was real."
)


def _provider(path: str, ln: int, text: str) -> Finding | None:
    for check, what, pattern in _PROVIDERS:
        m = pattern.search(text)
        if not m:
            continue
        key = m.groupdict().get("key")
        if key is not None and _looks_fake(key):
            continue
        shown = f" ({_mask(key)})" if key else ""
        return blocking(f"adds {what}{shown}.", check, path, ln, fix=_FIX)
    return None


def _credential_like(name: str, value: str) -> bool:
    """A bare ``token`` is a lexer's, a parser's or a version's token as often as a
    credential (python-semver: ``def bump_build(self, token="build")``): a value assigned to
    one is judged a secret only when it looks generated, not when it is a word."""
    if re.sub(r"[\W_]", "", name.rsplit(".", 1)[-1]).lower() != "token":
        return True
    return (
        len(value) >= 16 and bool(re.search(r"\d", value)) and bool(re.search(r"[A-Za-z]", value))
    )


def _assignment(path: str, ln: int, text: str, test: bool) -> Finding | None:
    m = _ASSIGNMENT.search(text)
    if m:
        value = m.group("value")
        if (
            not _PLACEHOLDER_VALUE.match(value)
            and not value.startswith(("$", "%"))
            and _credential_like(m.group("name"), value)
        ):
            make = warning if test else blocking
            return make(
                f"assigns a literal to {m.group('name')} ({_mask(value)}): a "
                "hard-coded credential.",
                "secrets.assignment",
                path,
                ln,
                fix=_FIX,
            )
    u = _URL_CREDENTIALS.search(text)
    if u and not _PLACEHOLDER_VALUE.match(u.group("value")):
        return warning(
            "adds a URL with a password in it.", "secrets.url-credentials", path, ln, fix=_FIX
        )
    return None


def _entropy(path: str, ln: int, text: str) -> Finding | None:
    for m in _QUOTED.finditer(text):
        value = m.group("value")
        if not (re.search(r"[A-Za-z]", value) and re.search(r"\d", value)):
            continue
        if _EXAMPLE.search(value):
            continue
        entropy = shannon_entropy(value)
        if entropy >= ENTROPY_THRESHOLD:
            return warning(
                f"adds a random-looking string ({_mask(value)}, {len(value)} characters, "
                f"entropy {entropy:.1f} bits/char); it may be a secret.",
                "secrets.high-entropy",
                path,
                ln,
                fix="If it is a credential, remove it and load it from the environment.",
            )
    return None


def check_conflict_markers(added: Mapping[str, Sequence[tuple[int, str]]]) -> list[Finding]:
    findings: list[Finding] = []
    for path, lines in added.items():
        outer = any(_CONFLICT.match(t) for _, t in lines)
        strict = outer or not classify.is_doc(path)
        for ln, text in lines:
            if _CONFLICT.match(text) or (strict and _CONFLICT_MID.match(text)):
                findings.append(
                    blocking(
                        f"adds a merge-conflict marker `{text.strip()[:20]}`: a conflict was "
                        "left unresolved.",
                        "conflict-marker",
                        path,
                        ln,
                        fix="Resolve the conflict and remove the markers.",
                    )
                )
    return findings


# secret files -----------------------------------------------------------------------------


class _ChangeLike(Protocol):
    @property
    def status(self) -> str: ...
    @property
    def path(self) -> str: ...


def check_secret_files(changes: Iterable[_ChangeLike]) -> list[Finding]:
    """Files that are secrets by their name or folder, added or changed."""
    return [
        blocking(
            f"adds {ch.path}, a file that holds credentials (SSH or PuTTY key, .netrc, "
            ".npmrc, .pypirc, key store, kubeconfig, cloud credentials, .env...).",
            "secrets.file",
            ch.path,
            fix="Remove it from the change (and from the branch's history); keep "
            "credentials out of the repository and rotate them if they were real.",
        )
        for ch in changes
        if ch.status != "D" and is_secret_path(ch.path)
    ]


def check_credential_documents(texts: Mapping[str, str]) -> list[Finding]:
    """Whole-file credentials: a cloud service-account key (``"type": "service_account"``
    with a ``private_key``), whatever the file is called."""
    out = []
    for path, text in texts.items():
        if '"service_account"' not in text or "private_key" not in text:
            continue
        try:
            doc = json.loads(text)
        except ValueError:
            continue
        if not isinstance(doc, dict) or doc.get("type") != "service_account":
            continue
        key = doc.get("private_key")
        if isinstance(key, str) and len(key) >= 40 and not _EXAMPLE.search(key):
            out.append(
                blocking(
                    f"adds a cloud service-account key file ({path}): it carries a private key "
                    "that signs in as that account.",
                    "secrets.cloud-credentials",
                    path,
                    fix=_FIX,
                )
            )
    return out


#: printable runs, as ``strings`` finds them: ASCII, and UTF-16LE (text with NULs between)
_ASCII_RUN = re.compile(r"[\x20-\x7e\t]{8,}")
_UTF16_RUN = re.compile(r"(?:[\x20-\x7e]\x00){8,}")
#: binary files larger than this are not read (and a warning says so)
MAX_BINARY_CHARS = 64_000_000


def printable_runs(data: str) -> set[str]:
    """The printable text inside binary content."""
    runs = set(_ASCII_RUN.findall(data))
    runs.update(m.replace("\0", "") for m in _UTF16_RUN.findall(data))
    return runs


def check_binary_secrets(
    paths: Iterable[str], content: Callable[[str], tuple[str | None, str | None]]
) -> list[Finding]:
    """Secrets in the printable text of binary files (``content``: path -> (old, new)).

    Only runs that were not in the old version count, so an unchanged asset does not block.
    """
    findings: list[Finding] = []
    for path in paths:
        old, new = content(path)
        if new is None:
            continue
        if len(new) > MAX_BINARY_CHARS:
            findings.append(
                warning(
                    f"{path} is a binary file too large to scan for secrets "
                    f"({len(new) // 1_000_000} MB).",
                    "secrets.unscanned",
                    path,
                    fix="Keep large binaries out of the change, or check them by hand.",
                )
            )
            continue
        seen = printable_runs(old) if old else set()
        for run in sorted(printable_runs(new) - seen):
            hit = _provider(path, 0, run) or _assignment(path, 0, run, False)
            if hit is not None and hit.blocking:
                findings.append(
                    hit.model_copy(
                        update={
                            "line": None,
                            "message": hit.message.rstrip(".") + " (in the printable "
                            "text of a binary file).",
                        }
                    )
                )
                break
    return findings
