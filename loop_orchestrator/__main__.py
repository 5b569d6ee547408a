from __future__ import annotations

from loop_orchestrator.cli.main import main

if __name__ == "__main__":
    main()
