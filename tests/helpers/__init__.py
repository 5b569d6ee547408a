"""What the tests share, as a small package beside conftest.py (which keeps only fixtures
and hooks): ``wait`` (the one wait helper), ``git`` (real repositories and commits),
``runs`` (demo projects, plans, the ledger, ``lo-orch`` in a subprocess), ``agents`` (the
real agent CLIs and their scripted endpoints), ``cli`` (the command line in this process),
``served`` (a listening inbox), ``codex_endpoint`` and ``gemini_endpoint`` (the scripted
endpoints for Codex CLI and Gemini CLI), ``intake`` (the stand-in Claude for planning) and
``verify`` (a task to verify).

Test modules import from here, never from conftest or from one another
(tests/test_layout.py keeps that).
"""

from __future__ import annotations

from pathlib import Path

#: the checkout under test
REPO_ROOT = Path(__file__).resolve().parent.parent.parent
