"""``$LO_ORCH_HOOK``: ``python -I -S <this file> hook EVENT``, what ``hooks/lo-hook`` runs
for every hook event of a managed session (``entry.by_path`` answers).

Run by its path with no site-packages, so it finds the package beside it itself (appended:
the standard library must win). Kept to these lines: a script is compiled at every start,
and ``entry.py`` compiled that way cost each hook event ~4 ms; imported, it is cached.
"""

from __future__ import annotations

import os
import sys

# -I ignores PYTHONPYCACHEPREFIX: where the supervisor cached the package's byte code
sys.pycache_prefix = os.environ.get("PYTHONPYCACHEPREFIX") or None
sys.path.append(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

from loop_orchestrator.entry import by_path  # noqa: E402 (found through the path set above)

by_path(sys.argv[1:])
