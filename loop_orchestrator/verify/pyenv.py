"""The Python environments the done-checks run in, fingerprinted so a change is seen.

A task's agent runs as the same user as lo-orch and can write into the project's ``.venv``
(linked into every verification checkout) and into a user-installed interpreter: a ``.pth``
file or a ``sitecustomize`` there runs before pytest, and an edited ``_pytest`` module can
report anything. ``checkout.check_env`` keeps out what the environment variables and the
checkout could add; this module covers the site folders themselves.

``take_baseline`` records every file and folder under the site folders of the interpreters
the plan's checks use and of the project's virtual environments (with their ``bin/``
scripts, ``pyvenv.cfg`` and the interpreter and check programs themselves), when a run
starts. ``changes`` compares the same folders later: any entry added, removed or changed
(size, mtime, ctime, mode, inode) is reported by name; ``shallow``, only the roots' own
entries (the look before the checks). The ctime cannot be set back by an unprivileged
process, so an edit cannot hide behind a restored mtime, nor a file added and removed
again behind its folder's. What is in ``__pycache__`` folders is left out: the checks
never read them (``PYTHONPYCACHEPREFIX``), and honest runs of the interpreter write them;
a package folder that only gained one is no change. The full scan runs in a process of
its own (``sitescan``); docs/design.md section 7 says why it is not cached.

Finding the folders never runs anything from them: a virtual environment is recognised by
its ``pyvenv.cfg``, whose ``include-system-site-packages`` says whether its base
interpreter's site folders count; an interpreter is asked with ``-I -S`` (no site module,
no environment variables, no user folder).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import sys
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from loop_orchestrator import proc
from loop_orchestrator.errors import LoOrchError
from loop_orchestrator.verify import sitescan
from loop_orchestrator.verify.models import Finding, blocking
from loop_orchestrator.verify.sitescan import FileStat

#: names of Python interpreters (python, python3, python3.12, pypy3...)
_PYTHON_NAME = re.compile(r"^(?:python|pypy)[0-9.]*$")
#: project virtual environments, as ``tempcheckout.DEPENDENCY_DIRS`` links them into checkouts
VENV_DIRS = (".venv", "venv")
#: the names whose change matters most; listed first in messages
_HOOK_NAME = re.compile(
    r"(?:^|/)(?:[^/]+\.pth|(?:site|user)customize(?:[./][^/]*)?|"
    r"[^/]+\.dist-info/entry_points\.txt)$"
)
_ASK = "import json, site; print(json.dumps({'site': site.getsitepackages()}))"
MAX_SHOWN = 8


@dataclass
class SiteBaseline:
    """Every file under the checks' site folders when the run started.

    A plain dataclass: tens of thousands of entries are not worth validating one by one.
    ``last`` is the latest comparison (when it started, what differed), shared by the
    verifications that ask while it runs (``changes``).
    """

    roots: list[str]
    files: dict[str, FileStat]
    #: digests of the states judged unchanged (the baseline's own first; ``changes``)
    digests: set[str] = field(default_factory=set, repr=False, compare=False)
    last: tuple[float, list[str]] | None = field(default=None, repr=False, compare=False)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)
    #: the shallow part of ``files`` (the roots and what is directly in them), as the
    #: shallow comparison sees it: picked out of the whole once, not per verification
    shallow_files: dict[str, FileStat] | None = field(default=None, repr=False, compare=False)

    def shallow(self) -> dict[str, FileStat]:
        """The roots and what is directly in them, as they were (folders by being there;
        ``files`` never changes: two threads that pick it out at once pick the same)."""
        if self.shallow_files is None:
            top = set(self.roots)
            then = {p: v for p, v in self.files.items() if p in top or _parent(p) in top}
            self.shallow_files = _folders_as_there(then, top)
        return self.shallow_files


def interpreter_of(argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> Path | None:
    """The Python interpreter ``argv`` starts, if it is one or a script with a Python
    ``#!`` line (``.venv/bin/pytest``, ``pytest`` on PATH, ``python3 -m pytest``)."""
    if not argv:
        return None
    program = _which(argv[0], cwd, env)
    if program is None:
        return None
    if _PYTHON_NAME.match(program.name):
        return program
    try:
        with program.open("rb") as fh:
            first = fh.readline(512)
    except OSError:
        return None
    if not first.startswith(b"#!"):
        return None
    words = first[2:].decode("utf-8", "replace").split()
    if words and Path(words[0]).name == "env":
        words = [w for w in words[1:] if not w.startswith("-")]
    if not words or not _PYTHON_NAME.match(Path(words[0]).name):
        return None
    return _which(words[0], cwd, env)


def _which(name: str, cwd: Path, env: Mapping[str, str]) -> Path | None:
    if "/" in name:
        path = Path(name) if Path(name).is_absolute() else cwd / name
        return path if path.is_file() else None
    found = shutil.which(name, path=env.get("PATH", os.defpath))
    return Path(found) if found else None


def site_roots(python: Path) -> list[Path]:
    """The folders ``python`` loads start-up code and libraries from, without running
    anything from them."""
    roots: list[Path] = [python]
    # where Python's site module looks for it, in its order
    cfgs = (python.parent / "pyvenv.cfg", python.parent.parent / "pyvenv.cfg")
    cfg = next((c for c in cfgs if c.is_file()), None)
    if cfg is not None:  # a virtual environment: its own site-packages, scripts, config
        venv = cfg.parent
        roots += sorted(venv.glob("lib*/python*/site-packages"))
        roots += sorted(venv.glob("Lib/site-packages"))
        roots += [cfg, *(d for d in (venv / "bin", venv / "Scripts") if d.is_dir())]
        try:
            text = cfg.read_text(encoding="utf-8", errors="replace")
        except OSError:
            text = ""  # (unreadable: taken as the default, the base's folders too)
        if not system_site_included(text):
            # the base interpreter's site folders are not on this one's path (nor its .pth
            # files run): what they hold cannot reach a check (it was 80 % of the scan,
            # the base of this venv); nothing left to ask
            return roots
    try:
        # -I ignores PYTHON* variables anyway; the rest is kept for launchers such as
        # pyenv's shims, which need their own variables to find the interpreter. With -S
        # a virtual environment's interpreter answers with its base's site folders
        env = {k: v for k, v in os.environ.items() if not k.startswith("PYTHON")}
        res = proc.run([str(python), "-I", "-S", "-c", _ASK], timeout=30, check=False, env=env)
        doc = json.loads(res.stdout) if res.ok else {}
    except (LoOrchError, OSError, ValueError):
        doc = {}
    roots += [Path(p) for p in doc.get("site", [])]
    return roots


def system_site_included(pyvenv_cfg: str) -> bool:
    """Whether a virtual environment with this ``pyvenv.cfg`` loads its base interpreter's
    site folders, read as Python's ``site`` module reads it: ``key = value`` lines, the
    key in any case, the last one counting; true unless it says otherwise."""
    included = "true"
    for line in pyvenv_cfg.splitlines():
        key, eq, value = line.partition("=")
        if eq and key.strip().lower() == "include-system-site-packages":
            included = value.strip().lower()
    return included == "true"


def check_roots(
    repo: Path, argvs: Iterable[Sequence[str]], env: Mapping[str, str] | None = None
) -> list[Path]:
    """Site folders of the project's virtual environments and of every interpreter the
    checks ``argvs`` start (resolved from ``repo``, which checkouts link ``.venv`` from)."""
    env = os.environ if env is None else env
    pythons: list[Path] = []
    for name in VENV_DIRS:
        for candidate in (repo / name / "bin" / "python", repo / name / "Scripts" / "python.exe"):
            if candidate.exists():
                pythons.append(candidate)
    programs: list[Path] = []
    for argv in argvs:
        found = interpreter_of(argv, repo, env)
        if found is not None:
            pythons.append(found)
        program = _which(argv[0], repo, env) if argv else None
        if program is not None:  # the script itself (.venv/bin/pytest, ~/.local/bin/pytest)
            programs.append(program.absolute())
    roots: dict[str, Path] = {str(p): p for p in programs}
    seen: set[str] = set()
    for python in pythons:
        key = str(python.absolute())
        if key in seen:
            continue
        seen.add(key)
        for root in site_roots(python):
            # symlinks are kept as they are (a retargeted .venv/bin/python is a change);
            # folders are walked where they really are
            real = root.resolve() if root.is_dir() else root.absolute()
            if root.exists():
                roots.setdefault(str(real), real)
    # a folder inside another one is walked once
    ordered = sorted(roots.values(), key=lambda p: len(p.parts))
    kept: list[Path] = []
    for root in ordered:
        if not any(root.is_relative_to(k) for k in kept):
            kept.append(root)
    return sorted(kept)


def fingerprint(roots: Iterable[Path], *, shallow: bool = False) -> dict[str, FileStat]:
    """``sitescan.fingerprint`` of ``roots``: every entry under them with its stat."""
    return sitescan.fingerprint([str(r) for r in roots], shallow=shallow)


def scan_digest(roots: Sequence[str]) -> str | None:
    """The digest of ``roots``' fingerprint, scanned by ``sitescan`` in a process of its
    own (lo-orch's interpreter with ``-I -S``: nothing from the scanned folders runs);
    None when that fails (then the scan is done in process)."""
    try:
        res = proc.run(
            [sys.executable, "-I", "-S", sitescan.__file__, *roots], timeout=120, check=False
        )
    except (LoOrchError, OSError):
        return None
    out = res.stdout.strip()
    return out if res.ok and len(out) == 64 else None


def take_baseline(
    repo: Path, argvs: Iterable[Sequence[str]], env: Mapping[str, str] | None = None
) -> SiteBaseline:
    """Fingerprint the checks' site folders now (when a run starts, before any agent)."""
    roots = check_roots(repo, argvs, env)
    files = fingerprint(roots)
    return SiteBaseline(
        roots=[str(r) for r in roots], files=files, digests={sitescan.digest(files)}
    )


def changes(baseline: SiteBaseline, *, shallow: bool = False) -> list[str]:
    """What differs from ``baseline`` now: ``"added <path>"``, ``"changed <path>"``,
    ``"removed <path>"``; start-up hooks (.pth, sitecustomize, entry points) first.

    ``shallow``: the roots and what is directly in them only (the start-up hooks, the
    scripts, the interpreter: a few hundred entries; the look before the checks run).

    "Now" means a scan that began after this call: verifications asking at the same time
    share one full scan (a scan of a full site folder is ~0.25 s of CPU; 16 verifications
    at once each scanning cost the supervisor a multiple of its whole run in a benchmark).
    """
    if shallow:
        top = set(baseline.roots)
        now = fingerprint([Path(r) for r in baseline.roots], shallow=True)
        # a folder in a root counts by being there (the full scan judges what is in it)
        return _diff(baseline.shallow(), _folders_as_there(now, top), top)
    asked = time.monotonic()
    with baseline.lock:
        if baseline.last is not None and baseline.last[0] >= asked:
            return list(baseline.last[1])
        started = time.monotonic()
        if scan_digest(baseline.roots) in baseline.digests:
            result: list[str] = []  # the state of a scan judged before: nothing to say
        else:  # (or the scan failed): scanned again here, to say what differs
            now = fingerprint(Path(r) for r in baseline.roots)
            result = _diff(baseline.files, now, set(baseline.roots))
            if not result:  # only what is no change (a __pycache__): known from now on
                baseline.digests.add(sitescan.digest(now))
        baseline.last = (started, result)
        return list(result)


def _parent(path: str) -> str:
    # (a string op: a scan's tens of thousands of paths are strings, not Path objects)
    return path.rpartition(os.sep)[0]


def _folders_as_there(files: Mapping[str, FileStat], roots: set[str]) -> dict[str, FileStat]:
    return {
        p: (0, 0, 0, v[3], v[4]) if stat.S_ISDIR(v[3]) and p not in roots else v
        for p, v in files.items()
    }


def _diff(then: Mapping[str, FileStat], now: Mapping[str, FileStat], roots: set[str]) -> list[str]:
    if then == now:
        return []
    added = now.keys() - then.keys()
    removed = then.keys() - now.keys()
    changed = {p for p in now.keys() & then.keys() if tuple(now[p]) != tuple(then[p])}
    for cache in [p for p in added if p.rpartition(os.sep)[2] == "__pycache__"]:
        # an honest first import compiles a module where nothing had been compiled (an
        # environment installed without byte code): its folder gained a __pycache__ and
        # nothing else. Not in a site root, where start-up hooks live (docs/design.md)
        folder = _parent(cache)
        others = (p for p in added | removed if p != cache and _parent(p) == folder)
        if folder not in roots and next(others, None) is None:
            added.discard(cache)
            changed.discard(folder)
    out = [f"added {p}" for p in added] + [f"removed {p}" for p in removed]
    out += [f"changed {p}" for p in changed]
    return sorted(out, key=lambda s: (not _HOOK_NAME.search(s), s))


def findings(diff: Sequence[str], *, when: str) -> list[Finding]:
    """One blocking finding naming the changed files (none when ``diff`` is empty)."""
    if not diff:
        return []
    shown = "; ".join(diff[:MAX_SHOWN]) + (
        f"; and {len(diff) - MAX_SHOWN} more" if len(diff) > MAX_SHOWN else ""
    )
    return [
        blocking(
            f"the Python environment the checks run in changed {when}: {shown}. A file in an "
            "interpreter's site folder (a .pth file, sitecustomize, an installed package) runs "
            "inside every check, so the checks cannot be trusted.",
            "done.environment-changed",
            fix="Do not install, edit or add anything in the project's .venv or the "
            "interpreter's folders; undo the change. If the task needs a new dependency, say "
            "so with `signal blocked`: a person installs it and restarts `lo-orch run`.",
        )
    ]
