"""How sessions report to the supervisor: a socket the kernel vouches for, and a fallback.

`lo-orch signal` and `lo-orch hook` never write a task's status. They send one JSON line
to the running supervisor over a Unix socket (Linux abstract namespace, so no file an
agent could replace) and wait for its answer. The supervisor asks the kernel who is
calling (``SO_PEERCRED``: the caller's pid, which the caller cannot choose) and walks that
pid's parent chain to the tmux pane of one task's session: the event belongs to *that*
task, whatever the message or the caller's environment claims. A message that names
another task, or comes from no managed session, is refused and logged.

When no supervisor listens (it crashed, or is being restarted), the client leaves the
message in ``.orchestration/inbox/<task>/`` and the next supervisor reads it as
*unattested*: a hint, never a decision (an unattested signal only makes the supervisor ask
the session to signal again; an unattested UserPromptSubmit only keeps a prompt from being
sent twice).

This module is the sessions' end, on every hook event's path, which runs under
``python -I -S`` (``entry.py``): it imports only what the interpreter has loaded at start
or builds in (``os``, ``sys``, ``time``, ``_socket``, ``_json``, the C SHA-256). ``json``,
``socket``, ``hashlib`` and ``pathlib`` would each add 3-13 ms of CPU to every hook event
(``re``, ``enum``, OpenSSL: measured in ``benchmarks/hooks.py``). ``listener`` is the
supervisor's end.
"""

from __future__ import annotations

import _socket
import os
import time

TYPE_CHECKING = False  # typing itself costs a hook event ~2 ms; mypy reads the block
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

INBOX_DIR = "inbox"
#: the largest message accepted (a hook payload is trimmed by the client well below)
MAX_MESSAGE = 64 * 1024
#: how long a client waits for the supervisor's answer
CLIENT_TIMEOUT = 10.0


# the wire's JSON and digest, without importing json or hashlib ----------------------------


def _sha256_class() -> Callable[[bytes], Any]:
    for name in ("_sha2", "_sha256"):  # CPython's own SHA-256 (3.12+, 3.11): no OpenSSL
        try:
            return __import__(name).sha256  # type: ignore[no-any-return]
        except ImportError:
            continue
    import hashlib  # another interpreter

    return hashlib.sha256


sha256 = _sha256_class()


def sha256_hex(data: bytes) -> str:
    """The SHA-256 of ``data``, in hex."""
    return str(sha256(data).hexdigest())


class _Decoding:
    """The settings ``_json.make_scanner`` reads: ``json.loads``'s defaults."""

    strict = True
    object_hook = None
    object_pairs_hook = None
    parse_float = float
    parse_int = int

    def __init__(self) -> None:
        constants = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": -float("inf")}
        self.parse_constant = constants.__getitem__


def _scanner() -> Callable[[str, int], tuple[Any, int]] | None:
    try:
        import _json
    except ImportError:
        return None
    # any object with json.JSONDecoder's settings as attributes will do (CPython's json)
    return _json.make_scanner(_Decoding())  # type: ignore[arg-type]


_scan = _scanner()
_WHITESPACE = " \t\n\r"


def loads(text: str) -> Any:
    """``json.loads(text)`` (ValueError when it is not one JSON value)."""
    if _scan is None:
        import json

        return json.loads(text)
    start = len(text) - len(text.lstrip(_WHITESPACE))
    try:
        value, end = _scan(text, start)
    except StopIteration:  # no value there, or one cut short
        msg = "not a JSON value"
        raise ValueError(msg) from None
    except RecursionError:
        msg = "JSON nested too deep"
        raise ValueError(msg) from None
    if text[end:].strip(_WHITESPACE):
        msg = "extra data after the JSON value"
        raise ValueError(msg)
    return value


def _quote(text: str) -> str:
    try:
        import _json
    except ImportError:
        import json

        return json.dumps(text)
    return str(_json.encode_basestring_ascii(text))


def dumps(value: Any) -> str:
    """``json.dumps(value)`` of what the wire carries: dicts with string keys, lists,
    strings, numbers, booleans and None (TypeError otherwise)."""
    if value is None:
        return "null"
    if value is True:
        return "true"
    if value is False:
        return "false"
    if isinstance(value, str):
        return _quote(value)
    if isinstance(value, int):
        return int.__repr__(value)
    if isinstance(value, float):
        if value != value:
            return "NaN"
        if value in (float("inf"), -float("inf")):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    if isinstance(value, dict):
        for key in value:
            if not isinstance(key, str):
                msg = f"keys must be strings, not {type(key).__name__}"
                raise TypeError(msg)
        return "{" + ", ".join(f"{_quote(k)}: {dumps(v)}" for k, v in value.items()) + "}"
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(dumps(v) for v in value) + "]"
    msg = f"{type(value).__name__} is not sent to the supervisor"
    raise TypeError(msg)


def address(run_dir: str | os.PathLike[str]) -> str:
    """The abstract socket name of the supervisor of ``run_dir`` (``.orchestration``)."""
    digest = sha256_hex(os.path.realpath(os.fspath(run_dir)).encode("utf-8"))[:32]
    return f"\0lo-orch/{digest}"


# client -------------------------------------------------------------------------------


def send(
    run_dir: str | os.PathLike[str],
    message: dict[str, Any],
    timeout: float = CLIENT_TIMEOUT,
    wait: float = 0.0,
) -> Any:
    """Send ``message`` to the running supervisor; its answer, or None when none listens.

    ``wait``: how long to keep trying while no supervisor listens (one being restarted).
    """
    where = address(run_dir)
    deadline = time.monotonic() + wait
    while True:
        sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
        sock.settimeout(timeout)
        try:
            sock.connect(where)
            break
        except (FileNotFoundError, ConnectionRefusedError):
            sock.close()
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.2)
    try:
        sock.sendall(dumps(message).encode("utf-8") + b"\n")
        sock.shutdown(_socket.SHUT_WR)
        chunks = []
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            chunks.append(chunk)
        data = b"".join(chunks).decode("utf-8")
        return loads(data) if data.strip() else None
    except (OSError, ValueError):
        return None
    finally:
        sock.close()


def leave(run_dir: str | os.PathLike[str], task: str, message: dict[str, Any]) -> str:
    """Leave ``message`` for the next supervisor (unattested); the file written."""
    folder = os.path.join(os.fspath(run_dir), INBOX_DIR, task)
    os.makedirs(folder, exist_ok=True)
    name = f"{time.time_ns()}-{os.getpid()}.json"
    tmp = os.path.join(folder, f".{name}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(dumps({**message, "left_at": time.time()}))
    final = os.path.join(folder, name)
    os.replace(tmp, final)
    return final
