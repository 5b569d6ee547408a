"""Clean checkouts for running checks: a temporary detached worktree, removed afterwards.

The agent's worktree may hold untracked files, caches or edits made after the commit; the
verdict is about the commit, so checks run in a fresh ``git worktree add --detach`` of it.
Hooks of the user's repository are disabled for that checkout (``core.hooksPath``), and
untracked dependency folders of the main checkout (``.venv``, ``node_modules``...) are
linked in, so a done-check such as ``.venv/bin/pytest`` or ``npx jest`` finds its tools.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import shutil
import tempfile
import uuid
from collections.abc import Mapping
from pathlib import Path

from loop_orchestrator import proc
from loop_orchestrator.git.checkouts import temp_checkout, write_owner


def clean_checkout(
    repo: Path, commit: str, *, link_dependencies: bool = True
) -> contextlib.AbstractContextManager[Path]:
    """A detached worktree of ``commit`` in a temporary folder with the main checkout's
    dependencies linked in, removed on exit (``tempcheckout.temp_checkout``)."""
    return temp_checkout(repo, commit, link_dependencies=link_dependencies)


#: where the checkout's folders travel to the start-up shim (never read as PYTHONPATH)
SYS_PATH_VAR = "LO_ORCH_CHECK_SYS_PATH"
#: variables of the surrounding environment that change what a check's interpreter or
#: pytest loads: every ``PYTHON*`` (PYTHONPATH, PYTHONSTARTUP, PYTHONHOME, PYTHONUSERBASE...)
#: and pytest's own option and plugin variables
_STRIPPED_PREFIXES = ("PYTHON",)
_STRIPPED = frozenset({"PYTEST_ADDOPTS", "PYTEST_PLUGINS", "PYTEST_DEBUG_TEMPROOT"})

# Runs as the interpreter's ``sitecustomize`` (our folder is the only PYTHONPATH entry):
# puts the checkout's folders where PYTHONPATH would have put them, then runs the
# interpreter's own sitecustomize, if it has one, from its site folders (never from the
# checkout: a ``sitecustomize.py`` there is a module like any other, imported only if a
# test imports it). Standard library only; it must not fail the interpreter's start.
_SHIM = """\
# Written by lo-orch (loop_orchestrator.verify.checkout); rewritten before every check.
import os as _os
import sys as _sys


def _lo_orch_start():
    import importlib.machinery
    import importlib.util

    here = _os.path.dirname(_os.path.abspath(__file__))
    extra = [p for p in _os.environ.get("@VAR@", "").split(_os.pathsep) if p]
    norm = [_os.path.abspath(p) if p else p for p in _sys.path]
    at = norm.index(here) if here in norm else 0
    _sys.path[at:at + (here in norm)] = extra
    skip = {here, *extra}
    spec = importlib.machinery.PathFinder.find_spec(
        "sitecustomize", [p for p in _sys.path if p and _os.path.abspath(p) not in skip])
    if spec is None or spec.loader is None:
        return
    module = importlib.util.module_from_spec(spec)
    _sys.modules["sitecustomize"] = module
    try:
        spec.loader.exec_module(module)
    except Exception as exc:  # what site.py does with a broken sitecustomize
        print(f"Error in sitecustomize: {type(exc).__name__}: {exc}", file=_sys.stderr)


_lo_orch_start()
del _lo_orch_start
""".replace("@VAR@", SYS_PATH_VAR)

#: the folder name prefix of a process's start-up shim folder (``recovery`` removes those
#: whose owner, named in ``CHECKOUT_OWNER_FILE``, was killed before its exit handler ran)
SHIM_PREFIX = "lo-orch-pystart-"
_shim_dir: Path | None = None


def _start_dir() -> Path:
    """This process's private folder holding the start-up shim, rewritten on every call
    (a check that changed it cannot carry the change to the next one)."""
    global _shim_dir
    if _shim_dir is None or not _shim_dir.is_dir():
        _shim_dir = Path(tempfile.mkdtemp(prefix=SHIM_PREFIX))
        atexit.register(shutil.rmtree, _shim_dir, ignore_errors=True)
    for child in _shim_dir.iterdir():
        if child.is_dir() and not child.is_symlink():
            shutil.rmtree(child, ignore_errors=True)
        else:
            child.unlink(missing_ok=True)
    write_owner(_shim_dir)
    (_shim_dir / "sitecustomize.py").write_text(_SHIM, encoding="utf-8")
    return _shim_dir


def check_env(tree: Path, base: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for commands run in a verification checkout.

    Nothing a task could have planted is loaded at the interpreter's start (issue
    "Tamper-proof supervision", item 8): every ``PYTHON*`` variable and ``PYTEST_ADDOPTS``/
    ``PYTEST_PLUGINS`` of the surrounding environment are dropped, the user site folder is
    off (no ``usercustomize``, no user ``.pth``), and the checkout is *not* on PYTHONPATH
    (site.py would import a ``sitecustomize.py`` from it): a start-up shim puts the checkout
    (and its ``src/``) first on ``sys.path`` instead, so an editable install of the main
    checkout still cannot shadow the code under test. Bytecode is neither written nor read
    from ``__pycache__`` folders (a planted ``.pyc`` would run instead of its source).
    ``GIT_*`` leaks removed; ``CI=true`` so test runners do not watch or prompt. The
    interpreter's own site folders are verified separately (``verify.pyenv``).
    """
    env = proc.no_git_env(base)
    for key in list(env):
        if (
            key.startswith(_STRIPPED_PREFIXES)
            or key in _STRIPPED
            or (key.startswith("LO_ORCH_") and key != "LO_ORCH_LOG_DIR")
        ):
            del env[key]
    start = _start_dir()
    paths = [str(tree)]
    if (tree / "src").is_dir():
        paths.append(str(tree / "src"))
    env[SYS_PATH_VAR] = os.pathsep.join(paths)
    env["PYTHONPATH"] = str(start)
    env["PYTHONNOUSERSITE"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    # A cache prefix nobody has written to: Python then ignores every __pycache__ folder.
    env["PYTHONPYCACHEPREFIX"] = str(start / f"pycache-{uuid.uuid4().hex}")
    env["CI"] = "true"
    return env
