"""``python -m loop_orchestrator`` (what ``$LO_ORCH_BIN`` runs in a session): ``lo-orch``."""

from __future__ import annotations

from loop_orchestrator.entry import main

if __name__ == "__main__":
    main()
