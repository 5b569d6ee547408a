"""``python -m loop_orchestrator.cluster.remote_attach --repo REPO --pane PANE``: what
`lo-orch attach TASK` runs for a session on a Ray cluster when no ``[cluster] ssh`` is set.

The terminal of this process is relayed (read-write, resized with it) to a tmux client that
the session's actor runs on its node, attached to that session's private tmux server
(``cluster/terminal.py``: ``relay`` here, ``TerminalHost`` on the node). Detach with tmux's
own key (prefix, d) as locally.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from loop_orchestrator.cluster.ray_backend import RayBackend
from loop_orchestrator.cluster.terminal import relay
from loop_orchestrator.errors import LoOrchError, TmuxError
from loop_orchestrator.runstate.state import Store
from loop_orchestrator.sessions.factory import run_backend


class _Endpoint:
    """The five terminal calls of ``relay`` as plain calls to the session's actor."""

    def __init__(self, ray: Any, handle: Any) -> None:
        self.ray, self.handle = ray, handle

    def _get(self, ref: Any, timeout: float | None = 60.0) -> Any:
        return self.ray.get(ref, timeout=timeout)

    def open(self, argv: list[str], rows: int, cols: int) -> str:
        # the node decides what runs (a tmux client of its session): ``argv`` is not sent
        return str(self._get(self.handle.term_open.remote(rows, cols)))

    def read(self, term_id: str, timeout: float) -> bytes | None:
        data: bytes | None = self._get(
            self.handle.term_read.remote(term_id, timeout), timeout + 60.0
        )
        return data

    def write(self, term_id: str, data: bytes) -> None:
        self._get(self.handle.term_write.remote(term_id, data))

    def resize(self, term_id: str, rows: int, cols: int) -> None:
        self._get(self.handle.term_resize.remote(term_id, rows, cols))

    def close(self, term_id: str) -> None:
        self._get(self.handle.term_close.remote(term_id))


def endpoint(repo: Path, pane_id: str) -> _Endpoint:
    """The terminal endpoint of ``pane_id``'s actor in the run of ``repo``."""
    backend = run_backend(Store.for_repo(repo).read_run())
    if not isinstance(backend, RayBackend):
        msg = "this run's sessions are not on a cluster"
        raise TmuxError(msg, hint="Use `lo-orch attach TASK`.")
    handle = backend.calls.handle(pane_id)
    if handle is None:
        msg = f"the session {pane_id} is gone"
        raise TmuxError(msg, hint="`lo-orch status` shows the task; `lo-orch run` relaunches it.")
    return _Endpoint(backend.calls.ray(), handle)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="lo-orch attach (cluster relay)")
    parser.add_argument("--repo", required=True, type=Path)
    parser.add_argument("--pane", required=True)
    args = parser.parse_args(argv)
    try:
        target = endpoint(args.repo, args.pane)

        code: int = relay(target, stdin_fd=0, stdout_fd=1)
    except LoOrchError as exc:
        sys.stderr.write(f"Error: {exc.render()}\n")
        return exc.exit_code
    return code


if __name__ == "__main__":
    sys.exit(main())
