"""The compiled client of what sessions run (``client.c``, ``lo-session``): what
``$LO_ORCH_HOOK`` and ``$LO_ORCH_BIN`` are where this machine has a C compiler.

Every hook event of every session starts the hook, PreToolUse before each tool call, and
the tool waits for it; a Python start alone is 11-13 ms of CPU and 25-35 ms of wall time
with 16 sessions at once on 2 cores, so no Python client can answer in the 30 ms a tool
call should wait at most. The compiled client starts in well under a millisecond, sends the
event as it came and prints the supervisor's answer (docs/design.md, "The hook's fast
path"); everything else it hands to the Python clients, which stay the fallback.

It is built once per install, source and compiler, by the supervisor (``client``), into
``_client/<key>/`` beside this file when the package folder is writable (a venv, a
checkout), else into the user's cache. Both folders are read-only to every session
(``sandbox``): a session that could replace it would answer its own hooks. A machine
without a compiler, or where the built program does not run (a ``noexec`` folder), keeps
the Python clients; ``lo-orch doctor`` says which one sessions get.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import logging
import os
import shutil
import tempfile
from pathlib import Path

from loop_orchestrator import proc
from loop_orchestrator.errors import LoOrchError

log = logging.getLogger(__name__)

SOURCE = Path(__file__).resolve().parent / "client.c"
NAME = "lo-session"
#: the answer of ``lo-session --lo-session-probe`` that shows the built program runs
PROBE = "--lo-session-probe"
PROBE_ANSWER = "lo-session 1"
#: the compilers tried, in order
COMPILERS = ("cc", "gcc", "clang")
#: the longest a build may take
BUILD_TIMEOUT = 60.0


def c_string(text: str) -> str:
    """``text`` as a C string literal: every byte but letters, digits and ``/._-+=:,@ ``
    as an octal escape (no quote, backslash, trigraph or newline can end up in the source)."""
    safe = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789/._-+=:,@ ")
    return '"' + "".join(chr(b) if b in safe else f"\\{b:03o}" for b in text.encode()) + '"'


def generated_source(full: list[str], fast: list[str], source: str) -> str:
    """The program's source as it is compiled: the two command lines (``LO_FULL``: the full
    command line; ``LO_FAST``: the standard-library client), then ``client.c``."""
    if not full or not fast:
        msg = "both command lines need a program"
        raise ValueError(msg)
    lines = [
        f"#define LO_FULL_ARGS {', '.join(c_string(a) for a in full)}",
        f"#define LO_FAST_ARGS {', '.join(c_string(a) for a in fast)}",
        '#line 1 "client.c"',
        source,
    ]
    return "\n".join(lines)


def build_key(generated: str, compiler: str) -> str:
    """The folder name of one build: what was compiled and by what."""
    return hashlib.sha256(f"{compiler}\0{generated}".encode()).hexdigest()[:20]


def compile_argv(compiler: str, source: Path, out: Path) -> list[str]:
    return [compiler, "-O2", "-o", str(out), str(source)]


def folders() -> list[Path]:
    """Where builds are kept, in the order they are tried: beside this file, the user's
    cache. Both are read-only to sessions (``sandbox._lo_orch_install``)."""
    cache = os.environ.get("XDG_CACHE_HOME", "").strip()
    home_cache = Path(cache) if cache else Path.home() / ".cache"
    beside = Path(__file__).resolve().parent / "_client"
    return [beside, home_cache / "loop-orchestrator" / "client"]


def _compiler() -> tuple[str, str] | None:
    """The first compiler found and what it says it is (``--version``'s first line)."""
    for name in COMPILERS:
        path = shutil.which(name)
        if path is None:
            continue
        with contextlib.suppress(LoOrchError, OSError):
            done = proc.run([path, "--version"], timeout=30, check=False)
            if done.ok:
                return path, (done.stdout.splitlines() or [""])[0]
    return None


def _runs(program: Path) -> bool:
    with contextlib.suppress(LoOrchError, OSError):
        done = proc.run([str(program), PROBE], timeout=30, check=False)
        return done.ok and done.stdout.strip() == PROBE_ANSWER
    return False


def _build(generated: str, compiler: str, target: Path) -> str | None:
    """Compile into ``target`` (replaced whole, never seen half-written); None, or why not."""
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryDirectory(dir=target.parent, prefix=".build-") as tmp:
            src, out = Path(tmp) / "client.c", Path(tmp) / NAME
            src.write_text(generated, encoding="utf-8")
            done = proc.run(compile_argv(compiler, src, out), timeout=BUILD_TIMEOUT, check=False)
            if not done.ok:
                return f"{compiler} failed: {(done.stderr.strip().splitlines() or [''])[-1]}"
            out.chmod(0o755)
            if not _runs(out):
                return f"the program built in {target.parent} does not run"
            out.replace(target)
    except (OSError, LoOrchError) as exc:
        return f"cannot build in {target.parent}: {exc}"
    return None


@functools.cache
def client(full: tuple[str, ...], fast: tuple[str, ...]) -> Path | None:
    """The compiled client for these two command lines, built when missing; None where it
    cannot be (no compiler, nowhere to keep it that can run it). Asked once per process."""
    path, why = locate_or_build(list(full), list(fast))
    if path is None:
        log.info("sessions use the Python client: %s", why)
    return path


def locate_or_build(
    full: list[str], fast: list[str], where: list[Path] | None = None
) -> tuple[Path | None, str]:
    """The client (built now when missing) in the first of ``where`` (``folders()``) that
    can hold and run it, or None and why not."""
    found = _compiler()
    if found is None:
        return None, f"no C compiler ({', '.join(COMPILERS)}) on PATH"
    compiler, identity = found
    generated = generated_source(full, fast, SOURCE.read_text(encoding="utf-8"))
    key = build_key(generated, identity or compiler)
    reasons = []
    for folder in folders() if where is None else where:
        target = folder / key / NAME
        if target.is_file() and _runs(target):
            return target, ""
        why = _build(generated, compiler, target)
        if why is None:
            return target, ""
        reasons.append(why)
    return None, "; ".join(reasons)
