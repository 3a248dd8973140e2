"""A session's head: what it keeps in front of its history (tool specs, the skills index).

llama-server renders the tool declarations before everything else, so a tool list that
changes under a session throws its whole KV cache away. This module is the one owner of the
rule that keeps it still.

Invariants:
- A session's head is fixed at its first turn and stored with it (``memory.session_heads``,
  keyed by the compaction cut). It changes only where the prompt's start changes anyway: at a
  compaction (a new cut) or in a new session. An MCP server that starts late, restarts,
  crashes or changes its list changes nothing in it.
- Before a head is built, the turn waits for tools still arriving (``ToolRegistry.settle``:
  MCP servers starting, each within its own ``timeout``), alongside recall and the prompt;
  what is still missing is left out with one line for the user and the log.
- The catalog tools (``list_available_tools`` / ``use_tool``) are always declared, so a tool
  that arrives after the head was fixed is reachable through them until the next compaction.
- The skills index (name and description of each enabled skill, ``luna.skills``) is fixed
  with the tools: a skill added, edited or removed reaches a session at its next compaction.
- A turn without tool rights declares only the head's guest tools, and no skills; with tools
  off (the demo model) nothing is declared and no head is kept, so a real model later starts
  the head.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass, field
from typing import Any

from luna.memory.contract import SessionMemory
from luna.observe import log_event
from luna.tools.contract import ToolRunner

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Head:
    """What one turn declares: the specs as sent, and lines about tools left out."""

    tools: list[dict[str, Any]] = field(default_factory=list)
    skills: list[dict[str, str]] = field(default_factory=list)  # [{name, description}]
    notes: list[str] = field(default_factory=list)  # only when this turn built the head

    @property
    def names(self) -> frozenset[str]:
        return frozenset(spec_name(s) for s in self.tools)


def _head(kept: dict[str, Any], notes: list[str]) -> Head:
    return Head(list(kept.get("tools") or []), list(kept.get("skills") or []), notes)


def spec_name(spec: dict[str, Any]) -> str:
    return str((spec.get("function") or {}).get("name", ""))


class SessionHeads:
    """Loads a session's head, or builds and keeps it at the session's first turn."""

    def __init__(self, memory: SessionMemory, registry: ToolRunner) -> None:
        self.memory = memory
        self.registry = registry

    async def for_session(self, session_id: str) -> Head:
        cut, kept = await self.memory.session_head(session_id)
        if kept is None:
            notes, skills = await asyncio.gather(self.registry.settle(), self._skills_index())
            for line in notes:
                log.warning("session %s: %s", session_id, line)
            built = {"tools": self.registry.specs(with_catalog=True), "skills": skills}
            kept = await self.memory.save_session_head(session_id, cut, built)
            log_event(
                "session_head",
                cut=cut,
                tools=len(kept["tools"]),
                skills=len(kept.get("skills") or []),
                left_out=notes,
            )
            return _head(kept, notes)
        return _head(kept, [])

    async def _skills_index(self) -> list[dict[str, str]]:
        library = self.registry.skills
        if library is None:
            return []
        catalog = await library.catalog()
        for problem in catalog.left_out:
            log.warning("skill left out: %s", problem.line)
        return catalog.index()

    def for_guest(self, head: Head) -> tuple[list[dict[str, Any]], frozenset[str]]:
        """The head's tools meant for everyone, and the names such a turn may run."""
        guest = frozenset(self.registry.guest_names())
        return [s for s in head.tools if spec_name(s) in guest], guest
