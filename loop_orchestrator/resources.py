"""Where this lo-orch is installed and the files that ship with it live: templates, the
plugin, the examples, and the command line that runs it (``lo_orch_bin``).

In a wheel they are under ``loop_orchestrator/_data/``; in a source checkout (editable
install, tests) they are at the repository root, which is itself the Claude Code plugin.
"""

from __future__ import annotations

import contextlib
import functools
import os
import py_compile
import shlex
import sys
from pathlib import Path

from loop_orchestrator import proc

#: the package's modules ``$LO_ORCH_HOOK`` imports (``tests/test_hooks_fast.py`` holds the
#: hook path to them). The supervisor caches their byte code (``cache_hook_code``): a
#: sandboxed pane may not write beside the package, and compiling them would cost every
#: hook event several milliseconds. By path, not imported: ``entry`` reaches the commands.
HOOK_MODULES = (
    "__init__.py",
    "entry.py",
    "sessions/__init__.py",
    "sessions/hooks.py",
    "sessions/inbox.py",
)

_PKG = Path(__file__).resolve().parent
_DATA = _PKG / "_data"
_SOURCE_ROOT = _PKG.parent


def _installed() -> bool:
    return (_DATA / "templates").is_dir()


def templates_dir() -> Path:
    return _DATA / "templates" if _installed() else _SOURCE_ROOT / "templates"


def plugin_dir() -> Path:
    """The folder to hand to ``claude --plugin-dir`` (holds ``.claude-plugin/``)."""
    return _DATA / "plugin" if _installed() else _SOURCE_ROOT


def examples_dir() -> Path:
    return _DATA / "examples" if _installed() else _SOURCE_ROOT / "examples"


@functools.cache
def installed_for_interpreter() -> bool:
    """Does a fresh ``sys.executable`` started elsewhere import *this* copy of the package?

    An agent pane runs in a worktree, where a source checkout that is only importable from
    its own folder is not on the path; an installed (or editable) package is. Asked once.
    """
    result = proc.run(
        [sys.executable, "-c", "import loop_orchestrator; print(loop_orchestrator.__file__)"],
        cwd="/",
        timeout=30,
        check=False,
    )
    if not result.ok or not result.stdout.strip():
        return False
    found = Path(result.stdout.strip().splitlines()[-1]).resolve().parent
    return found == _PKG


def python_module_argv(module: str) -> list[str]:
    """An argv running ``python -m module`` with this interpreter, from any folder."""
    python = str(Path(sys.executable).absolute())  # not resolved: that would leave the venv
    if installed_for_interpreter():
        return [python, "-m", module]
    bootstrap = (
        "import runpy, sys; "
        f"sys.path.insert(0, {str(_SOURCE_ROOT)!r}); "
        f"runpy.run_module({module!r}, run_name='__main__', alter_sys=True)"
    )
    return [python, "-c", bootstrap]


def lo_orch_bin() -> str:
    """The command line that runs this lo-orch (``LO_ORCH_BIN``), usable with ``sh -c``."""
    return shlex.join(python_module_argv("loop_orchestrator"))


@functools.cache
def cache_hook_code() -> None:
    """Write the byte code of ``HOOK_MODULES`` where this interpreter keeps it (beside the
    package, or under ``PYTHONPYCACHEPREFIX``), once per process, as importing them would;
    nothing when byte code is not to be written (``PYTHONDONTWRITEBYTECODE``) or cannot be."""
    if sys.dont_write_bytecode:
        return
    for rel in HOOK_MODULES:
        with contextlib.suppress(py_compile.PyCompileError, OSError):
            py_compile.compile(str(_PKG / rel), doraise=True)


#: ``LO_ORCH_CLIENT=python`` in the supervisor's environment: sessions get the Python
#: clients even where the compiled one can be built (a comparison, a suspected fault)
CLIENT_ENV = "LO_ORCH_CLIENT"


def python_client_argv() -> list[str]:
    """The standard-library client of sessions' calls: this interpreter isolated and
    without site-packages (``-I -S``), running ``sessions/fast_entry.py`` by its path."""
    python = str(Path(sys.executable).absolute())  # not resolved: that would leave the venv
    return [python, "-I", "-S", str(_PKG / "sessions" / "fast_entry.py")]


def session_client() -> Path | None:
    """The compiled client of sessions' calls (``sessions/native.py``), built when missing;
    None where it cannot be, or with ``LO_ORCH_CLIENT=python``."""
    if _python_asked():
        return None
    from loop_orchestrator.sessions import native

    full = tuple(python_module_argv("loop_orchestrator"))
    return native.client(full, tuple(python_client_argv()))


def session_client_status() -> tuple[Path | None, str]:
    """The compiled client (built now when missing), or None and why sessions get the
    Python one (``lo-orch doctor``)."""
    if _python_asked():
        return None, f"{CLIENT_ENV}=python is set"
    from loop_orchestrator.sessions import native

    return native.locate_or_build(python_module_argv("loop_orchestrator"), python_client_argv())


def _python_asked() -> bool:
    return os.environ.get(CLIENT_ENV, "").strip().lower() == "python"


def python_hook() -> str:
    """``LO_ORCH_HOOK`` of the Python client (``python -I -S .../fast_entry.py hook``),
    its byte code cached first (``cache_hook_code``)."""
    cache_hook_code()
    return shlex.join([*python_client_argv(), "hook"])


def lo_orch_hook() -> str:
    """The command line that answers a hook event (``LO_ORCH_HOOK``; ``$LO_ORCH_HOOK EVENT``
    with the event's JSON on stdin), usable with ``sh -c``: the compiled client where there
    is one, else the Python client. Either falls back on the Python one, whose byte code is
    cached first (``cache_hook_code``)."""
    hook = python_hook()
    client = session_client()
    return shlex.join([str(client), "hook"]) if client is not None else hook


def session_bin() -> str:
    """``LO_ORCH_BIN`` in a session: the compiled client where there is one (it answers
    ``signal`` itself and runs the full command line for anything else), else
    ``lo_orch_bin``."""
    client = session_client()
    return shlex.join([str(client)]) if client is not None else lo_orch_bin()


def install_paths() -> dict[str, str]:
    """Where this machine's lo-orch install is, by kind: the Python it runs in, the folder
    handed to ``claude --plugin-dir``, its source root (a checkout run from source). A
    launch names the supervisor's; a node runs its own (installed elsewhere, as likely)."""
    return {
        "python": str(Path(sys.executable).absolute()),  # not resolved: that leaves the venv
        "plugin": str(plugin_dir()),
        "source": str(_SOURCE_ROOT),
    }
