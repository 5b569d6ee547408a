"""A user's terminal end of the attach relay, run by tests/test_cluster_terminal.py in a
local tmux pane (a real terminal):

    python tests/relay_entry.py ADDRESS NAMESPACE ACTOR ARGV_JSON RESULT_FILE

relays to the named Ray actor (or, with ADDRESS ``local``, to a TerminalHost in this
process), then writes ``{"code": ..., "restored": ...}`` to RESULT_FILE: the relay's exit
code and whether the terminal's mode is the one it had before.
"""

from __future__ import annotations

import json
import sys
import termios
from pathlib import Path
from typing import Any

from loop_orchestrator.cluster.terminal import TerminalHost, relay


class ActorEndpoint:
    """A node actor's calls as plain blocking calls (what the Ray backend gives relay)."""

    def __init__(self, handle: Any) -> None:
        import ray

        self._ray = ray
        self._handle = handle

    def open(self, argv: list[str], rows: int, cols: int) -> str:
        return str(self._ray.get(self._handle.open.remote(argv, rows, cols)))

    def read(self, term_id: str, timeout: float) -> bytes | None:
        data: bytes | None = self._ray.get(self._handle.read.remote(term_id, timeout))
        return data

    def write(self, term_id: str, data: bytes) -> None:
        self._ray.get(self._handle.write.remote(term_id, data))

    def resize(self, term_id: str, rows: int, cols: int) -> None:
        self._ray.get(self._handle.resize.remote(term_id, rows, cols))

    def close(self, term_id: str) -> None:
        self._ray.get(self._handle.close.remote(term_id))


class LocalEndpoint(TerminalHost):
    """A TerminalHost that remembers the pid of what it closed."""

    closed_pids: list[int]

    def close(self, term_id: str) -> None:
        pid = self.pid(term_id)
        if pid is not None:
            self.closed_pids = [*getattr(self, "closed_pids", []), pid]
        super().close(term_id)


def main() -> int:
    address, namespace, actor, argv_json, result_file = sys.argv[1:6]
    argv = json.loads(argv_json)
    before = termios.tcgetattr(0)
    result: dict[str, Any] = {}
    if address == "local":
        local = LocalEndpoint()
        result["code"] = relay(local, stdin_fd=0, stdout_fd=1, argv=argv)
        pids = getattr(local, "closed_pids", [])
        result["remote_alive"] = any(Path(f"/proc/{p}").exists() for p in pids) or not pids
    else:
        import logging

        import ray

        ray.init(
            address=address,
            namespace=namespace,
            log_to_driver=False,
            logging_level=logging.ERROR,
        )
        endpoint = ActorEndpoint(ray.get_actor(actor))
        result["code"] = relay(endpoint, stdin_fd=0, stdout_fd=1, argv=argv)
    result["restored"] = termios.tcgetattr(0) == before
    partial = Path(result_file + ".tmp")
    partial.write_text(json.dumps(result), encoding="utf-8")
    partial.replace(result_file)
    return 0


if __name__ == "__main__":
    sys.exit(main())
