"""loop-orchestrator: parallel AI coding sessions, independently verified, merged after review."""

from __future__ import annotations

__version__ = "0.1.0"
