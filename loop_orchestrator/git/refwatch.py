"""A watch on a repository's ref files: a callback whenever a loose ref under one of some
prefixes, or ``packed-refs``, is written, renamed or deleted (watchdog, inotify where it
has it: no poll).

It only says *that* something changed; what changed is for the caller to compare with its
own record (``workspace.branches.Branches.moved``), so lo-orch's own ref moves are seen
here too and are no alarm. git writes a ref as ``<ref>.lock`` renamed over ``<ref>`` (a
*move* whose destination is the ref) and ``packed-refs`` the same way; both ends of a move
count.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from pathlib import Path

from watchdog.events import (
    DirDeletedEvent,
    DirMovedEvent,
    FileClosedEvent,
    FileCreatedEvent,
    FileDeletedEvent,
    FileModifiedEvent,
    FileMovedEvent,
    FileSystemEvent,
    FileSystemEventHandler,
)
from watchdog.observers import Observer
from watchdog.observers.api import BaseObserver

from loop_orchestrator.git.gateway import common_dir

log = logging.getLogger(__name__)

PACKED_REFS = "packed-refs"
#: the kinds of change that can move a ref (a write, a rename over it, a deletion); the
#: kernel is asked for these only, not for every git command's reads of HEAD, config and
#: the refs (opened, closed unwritten: most of what a busy run's git does, each of them
#: an event read and thrown away on the watch's thread)
WRITES = [
    FileCreatedEvent,
    FileModifiedEvent,
    FileClosedEvent,
    FileMovedEvent,
    DirMovedEvent,
    FileDeletedEvent,
    DirDeletedEvent,
]


def concerns(rel: str, prefixes: Sequence[str]) -> bool:
    """Whether a change of the file ``rel`` (relative to the common git folder, ``/``
    separated) may have changed a ref of ``prefixes`` (a ref name, or a folder of refs
    ending in ``/``)."""
    name = rel.removesuffix(".lock")
    if name == PACKED_REFS:
        return True
    return any(name == p or (p.endswith("/") and name.startswith(p)) for p in prefixes)


class RefWatch:
    """Calls ``changed`` (on watchdog's thread) when a ref under ``prefixes`` may have
    changed in ``repo``; ``start`` and ``stop`` it."""

    def __init__(self, repo: Path, prefixes: Sequence[str], changed: Callable[[], None]) -> None:
        self.common = common_dir(repo)
        self.prefixes = tuple(prefixes)
        self.changed = changed
        self._observer: BaseObserver | None = None

    def start(self) -> None:
        watch = self

        class Handler(FileSystemEventHandler):
            def on_any_event(self, event: FileSystemEvent) -> None:
                if event.event_type in ("opened", "closed_no_write"):
                    return  # reads, ours included
                paths = [event.src_path, getattr(event, "dest_path", "")]
                if any(p and watch.concerns(p) for p in paths):
                    watch.changed()

        refs = self.common / "refs"
        refs.mkdir(exist_ok=True)
        observer = Observer()
        # packed-refs
        observer.schedule(Handler(), str(self.common), recursive=False, event_filter=WRITES)
        observer.schedule(Handler(), str(refs), recursive=True, event_filter=WRITES)
        observer.daemon = True
        observer.start()
        self._observer = observer
        log.info("ref watch started", extra={"git_dir": str(self.common)})

    def concerns(self, path: str | bytes) -> bool:
        text = path.decode() if isinstance(path, bytes) else path
        try:
            rel = Path(text).relative_to(self.common).as_posix()
        except ValueError:
            return False
        return concerns(rel, self.prefixes)

    def stop(self) -> None:
        observer, self._observer = self._observer, None
        if observer is not None:
            observer.stop()
            observer.join(timeout=5)
