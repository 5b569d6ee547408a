"""The scripted model's side of aider's chat (``chat_endpoint.ChatEndpoint`` serves it).

aider (PyPI ``aider-chat``) offers no tools: the model edits files in the text of its
answer (an *edit format*) and suggests shell commands in fenced ``bash`` blocks, which
aider runs after the answer. lo-orch runs it with the SEARCH/REPLACE format (``diff``, the
one that has shell commands), so a request is aider's when it has no ``tools`` and its
system prompt asks for ``SEARCH/REPLACE`` blocks (``is_aider``).

One prompt is one answer: aider sends nothing back after its shell commands ran (their
output joins the chat for the next prompt), so every step the script has for a prompt goes
in one reply (``combined``): a Write as a shell command (a SEARCH/REPLACE block of a file
aider has not shown would append to it, not replace it), an Edit of whole lines before any
command as a SEARCH/REPLACE block aider applies itself (it applies edits before it runs
commands), every other step as a shell command.

A request names no session and no folder: a session is known by its first prompt
(``aider_session``), each task's prompts naming it. aider's own user messages (its
examples, the files it shares, the output of the commands it ran, its edit reports) are
not prompts (``aider_conversation``); when an answer names a file aider has not added, it
adds it and asks again without applying anything: that request gets the same answer.
"""

from __future__ import annotations

import base64
import hashlib
from collections.abc import Mapping
from typing import Any

from loop_orchestrator.simulator.replies import Conversation, Step

#: the user message that ends aider's example conversation
_EXAMPLES_END = "I switched to a new code base."
#: the starts of aider's own user messages (aider 0.86: coders/base_prompts.py and
#: base_coder.py), never a person's prompt
_CONTEXT_STARTS = (
    "I have *added these files to the chat*",
    "I am not sharing any files that you can edit yet.",
    "I am not sharing the full contents of any files with you yet.",
    "Don't try and edit any existing code without asking",
    "Here are summaries of some files present in my git repository.",
    "Here are some READ ONLY files",
    "I committed the changes with git hash",
    "I updated the files.",
    "I didn't see any properly formatted edits",
    "I edited the files myself.",
    "Output from ",
    "I spoke to you previously about a number of things.",
    "The LLM did not conform to the edit format.",
)
#: aider's message after an answer that named files of the repository not in its chat: it
#: adds them and asks again, the answer's edits and commands not applied (they are, when
#: the answer comes again)
_ADDED = "I added these files to the chat:"
#: where aider's reminder starts when it appends it to the last prompt
_REMINDER_STARTS = ("\n\n# *SEARCH/REPLACE block* Rules:", "\n\nTo suggest changes to a file")


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return ""


def is_aider(body: Mapping[str, Any]) -> bool:
    """Whether a Chat Completions request is an aider turn in its SEARCH/REPLACE format."""
    if body.get("tools"):
        return False
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    return bool(messages) and any(
        m.get("role") == "system" and "SEARCH/REPLACE" in _text(m.get("content")) for m in messages
    )


def _own(text: str) -> bool:
    """An aider user message of its own making (``_CONTEXT_STARTS``, a failed block)."""
    stripped = text.lstrip()
    return stripped.startswith(_CONTEXT_STARTS) or (
        stripped.startswith("# ") and "SEARCH/REPLACE block" in stripped[:80]
    )


def _without_reminder(text: str) -> str:
    cut = min((i for i in (text.find(s) for s in _REMINDER_STARTS) if i >= 0), default=-1)
    return text[:cut] if cut >= 0 else text


def aider_conversation(body: Mapping[str, Any]) -> Conversation:
    """An aider request's prompts (its examples, context and reports left out) and its
    replies since the last one; aider names no folder."""
    messages = [m for m in body.get("messages") or [] if isinstance(m, dict)]
    start = 0
    for i, message in enumerate(messages):
        if message.get("role") == "user" and _text(message.get("content")).startswith(
            _EXAMPLES_END
        ):
            start = i + 1
    prompts: list[str] = []
    since = 0
    for message in messages[start:]:
        role = message.get("role")
        text = _text(message.get("content"))
        if role == "assistant":
            since += 1
        elif role == "user" and text.startswith(_ADDED):
            since = 0  # the prompt asked again, with the files its answer named
        elif role == "user" and text.strip() and not _own(text):
            prompts.append(_without_reminder(text).strip())
            since = 0
    return Conversation(prompts, since, None)


def aider_session(convo: Conversation) -> str:
    """The session of an aider request: its first prompt's digest (one per task), its
    whitespace as words apart."""
    if not convo.prompts:
        return "aider:unknown"
    # as a restored chat history gives it back: its lines' ends may differ
    first = " ".join(convo.prompts[0].split())
    return "aider:" + hashlib.sha256(first.encode()).hexdigest()[:16]


def _b64(text: str) -> str:
    return base64.b64encode(text.encode()).decode()


def one_line(command: str) -> str:
    """``command`` as one line: aider runs each line of a ``bash`` block on its own."""
    if "\n" not in command:
        return command
    return f'sh -c "$(printf %s {_b64(command)} | base64 -d)"'


def search_replace(path: str, old: str, new: str) -> str:
    """A SEARCH/REPLACE block that replaces ``old`` by ``new`` in ``path``."""
    return f"{path}\n```\n<<<<<<< SEARCH\n{old}=======\n{new}>>>>>>> REPLACE\n```"


_MARKERS = ("<<<<<<<", "=======", ">>>>>>>")


def _native_edit(spec: Mapping[str, Any]) -> bool:
    """An Edit aider applies as it is meant: whole lines, no fence inside."""
    old, new = str(spec.get("old_string", "")), str(spec.get("new_string", ""))
    return (
        bool(old.strip())
        and old.endswith("\n")
        and (new.endswith("\n") or not new)
        and "```" not in old + new
        and not any(line.startswith(_MARKERS) for line in (old + new).splitlines())
    )


def combined(steps: list[Step], as_shell: Any) -> Step:
    """The steps of one prompt as one aider answer: their words, then the edits, then the
    shell commands; their delays added, their faults first. ``as_shell`` makes a tool
    call one shell command (``chat_endpoint.as_shell``)."""
    words: list[str] = []
    edits: list[str] = []
    commands: list[str] = []
    delay = 0.0
    faults = []
    for step in steps:
        delay += step.delay
        faults += step.faults
        if step.text and step.text != "Done.":
            words.append(step.text)
        if step.tool is None:
            continue
        name, spec = step.tool
        if name == "Read":
            continue  # aider reads a file by adding it to the chat, not by a command
        # aider applies the edits of an answer before it runs its commands: an Edit after
        # a command (of a file the command writes, say) goes as a command too
        if name == "Edit" and not commands and _native_edit(spec):
            path, old, new = str(spec["file_path"]), spec["old_string"], spec["new_string"]
            edits.append(search_replace(path, str(old), str(new)))
            continue
        command = as_shell(step.tool)
        if command is None:
            words.append(f"(scripted: aider has no tool {name!r})")
            continue
        commands.append(one_line(str(command)))
    parts = [*words, *edits]
    if commands:
        parts.append("```bash\n" + "\n".join(commands) + "\n```")
    text = "\n\n".join(parts) or "Done."
    return Step(text, None, delay, faults)


def shell_commands(text: str) -> list[str]:
    """The commands of the ``bash`` blocks of an answer (for tests and the request log)."""
    found: list[str] = []
    inside = False
    for line in text.splitlines():
        if line.strip() == "```bash":
            inside = True
        elif line.strip() == "```" and inside:
            inside = False
        elif inside and line.strip():
            found.append(line)
    return found
