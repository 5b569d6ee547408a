"""Where the files that ship with lo-orch live: templates, the plugin, the examples.

In a wheel they are under ``loop_orchestrator/_data/``; in a source checkout (editable
install, tests) they are at the repository root, which is itself the Claude Code plugin.
"""

from __future__ import annotations

from pathlib import Path

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
