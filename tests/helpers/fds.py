"""A process holding many files, as a long-lived supervisor or a node's actor may: its next
descriptors are past 1024, which select() refuses."""

from __future__ import annotations

import contextlib
import os
import resource
from collections.abc import Iterator


@contextlib.contextmanager
def past_fd_1024(count: int = 1100) -> Iterator[None]:
    """Hold ``count`` open files (the soft limit raised for them, and put back after)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    need = count + 100
    assert hard == resource.RLIM_INFINITY or hard >= need, f"the test needs {need} files"
    resource.setrlimit(resource.RLIMIT_NOFILE, (max(soft, need), hard))
    held = [os.open(os.devnull, os.O_RDONLY) for _ in range(count)]
    try:
        yield
    finally:
        for fd in held:
            os.close(fd)
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
