"""Terminal input as the scripted agent reads it: raw bytes to pastes, text and keys.

Bracketed pastes (``ESC[200~ ... ESC[201~``, sent by ``tmux paste-buffer -p`` once the
program enabled the mode) arrive whole even when split across reads; escape sequences
become named keys; UTF-8 is decoded across read boundaries.
"""

from __future__ import annotations

import re

PASTE_START = b"\x1b[200~"
PASTE_END = b"\x1b[201~"
_CSI_RE = re.compile(rb"\x1b[\[O]([0-9;]*)([\x40-\x7e])")
_CSI_KEYS = {
    b"A": "Up",
    b"B": "Down",
    b"C": "Right",
    b"D": "Left",
    b"Z": "BTab",
    b"H": "Home",
    b"F": "End",
}


def _partial_suffix(data: bytes, marker: bytes) -> int:
    """Length of the longest end of ``data`` that could start ``marker``."""
    for size in range(min(len(marker) - 1, len(data)), 0, -1):
        if marker.startswith(data[-size:]):
            return size
    return 0


def _utf8_length(lead: int) -> int:
    if lead >= 0xF0:
        return 4
    if lead >= 0xE0:
        return 3
    if lead >= 0xC0:
        return 2
    return 1


class InputParser:
    """Raw terminal bytes -> events ``("paste", text)``, ``("text", s)``, ``("key", name)``.

    Keeps incomplete sequences (a paste split across reads, half an escape sequence, half
    a UTF-8 character) until the rest arrives.
    """

    def __init__(self) -> None:
        self.buf = b""
        self.in_paste = False
        self.paste = bytearray()

    def feed(self, data: bytes) -> list[tuple[str, str]]:
        self.buf += data
        events: list[tuple[str, str]] = []
        while self.buf:
            if self.in_paste:
                end = self.buf.find(PASTE_END)
                if end < 0:
                    keep = _partial_suffix(self.buf, PASTE_END)
                    self.paste += self.buf[: len(self.buf) - keep]
                    self.buf = self.buf[len(self.buf) - keep :]
                    break
                self.paste += self.buf[:end]
                self.buf = self.buf[end + len(PASTE_END) :]
                self.in_paste = False
                events.append(("paste", bytes(self.paste).decode("utf-8", "replace")))
                self.paste = bytearray()
                continue
            first = self.buf[0]
            if first == 0x1B:
                if self.buf.startswith(PASTE_START):
                    self.in_paste = True
                    self.buf = self.buf[len(PASTE_START) :]
                    continue
                if len(self.buf) == 1 or PASTE_START.startswith(self.buf):
                    break  # the rest may follow; flush() turns a lone ESC into Escape
                if self.buf[1:2] in (b"[", b"O"):
                    match = _CSI_RE.match(self.buf)
                    if match is None and len(self.buf) < 16:
                        break
                    if match is not None:
                        self.buf = self.buf[match.end() :]
                        name = _CSI_KEYS.get(match.group(2))
                        if name:
                            events.append(("key", name))
                        continue
                self.buf = self.buf[1:]
                events.append(("key", "Escape"))
                continue
            if first in (0x0D, 0x0A):
                events.append(("key", "Enter"))
            elif first in (0x7F, 0x08):
                events.append(("key", "BSpace"))
            elif first == 0x03:
                events.append(("key", "C-c"))
            elif first == 0x04:
                events.append(("key", "C-d"))
            elif first == 0x09:
                self._text(events, " ")
            elif first < 0x20:
                pass
            else:
                size = _utf8_length(first)
                if len(self.buf) < size:
                    break
                self._text(events, self.buf[:size].decode("utf-8", "replace"))
                self.buf = self.buf[size:]
                continue
            self.buf = self.buf[1:]
        return events

    @staticmethod
    def _text(events: list[tuple[str, str]], text: str) -> None:
        if events and events[-1][0] == "text":
            events[-1] = ("text", events[-1][1] + text)
        else:
            events.append(("text", text))

    def flush(self) -> list[tuple[str, str]]:
        """Called when no more input came for a moment: a lone ESC was the Escape key."""
        if not self.in_paste and self.buf == b"\x1b":
            self.buf = b""
            return [("key", "Escape")]
        return []
