"""The librarian: background compaction of long sessions and extraction of lasting facts.

Invariants:
- ``maybe_schedule`` never blocks and never delays a reply: it starts at most one background
  pass per session (tracked in a set of tasks) and returns at once.
- A pass runs when the session's prompt tokens pass the context (the smaller of
  ``llm.context_tokens`` and the server's own) × ``memory.context_threshold``, when a request
  had to be trimmed to fit, or when ``memory.compact_every_messages`` messages have piled up
  since the last cut. Prompt tokens include any reasoning kept in the history
  (``llm.history_reasoning = "keep"``), so its cost in context is counted. It summarizes all
  but the last ``memory.retain_messages`` messages (the boundary is moved back so a tool call
  is never split from its results), folding the previous summary into the new one.
- Facts with importance ≥ ``memory.fact_importance_threshold`` are stored; a near-duplicate
  (cosine ≥ ``memory.dedup_similarity``) is merged into the existing fact; for similar but
  different facts the model is asked which ones the new fact replaces, and those are superseded.
- The model's JSON is parsed robustly (think text, code fences, trailing prose). A failed pass
  is retried once, then the session backs off exponentially: the transcript is not re-sent on
  every turn.
- Images before the cut reach the summary as their descriptions (``image_descriptions``):
  after a compaction no image before the cut is sent again.
- ``aclose`` waits briefly for running passes, then cancels them.
"""

from __future__ import annotations

import asyncio
import functools
import json
import logging
import re
import time
from typing import TYPE_CHECKING, Any

from luna.config import Config
from luna.errors import LLMError
from luna.llm.markup import strip_think
from luna.memory.storage import session_log
from luna.messages import LoggedMessage
from luna.observe import log_event

if TYPE_CHECKING:
    from luna.llm.contract import ChatModel
    from luna.memory import Memory

log = logging.getLogger(__name__)

MAX_MESSAGE_CHARS = 2000
MAX_TOOL_CHARS = 400
SIMILAR_CANDIDATE = 0.55  # facts this similar (cosine) may be contradicted by a new one
BACKOFF_START_S = 300.0
BACKOFF_MAX_S = 3600.0
CLOSE_GRACE_S = 5.0

SUMMARY_PROMPT = """You maintain the long-term memory of a personal assistant.
You get the previous summary of a conversation (may be empty) and the next part of the
conversation. Reply with one JSON object and nothing else:
{"summary": "<the updated cumulative summary: the previous summary merged with what happened in
the new part; keep names, dates, decisions, open tasks; at most 250 words>",
 "facts": [{"text": "<one self-contained fact about the user, their life, preferences, plans or
 people, written in third person with concrete names and dates>", "importance": <1-10>,
 "speaker": "user" or "assistant"}]}
Importance: 1-2 trivia or small talk, 3-5 useful context, 6-8 lasting preferences and facts,
9-10 critical (health, family, commitments). Only facts worth remembering for weeks."""

SUPERSEDE_PROMPT = """You keep a personal assistant's fact memory consistent.
For each NEW fact you get the most similar EXISTING facts with their ids. An existing fact is
replaced when the new fact makes it no longer true (e.g. "moved to Lisbon" replaces "lives in
Porto"). Facts that merely add detail replace nothing. Reply with one JSON object only:
{"replaces": {"<new fact number>": [<existing ids it replaces>]}}"""

_FENCE = re.compile(r"```(?:json)?\s*(.*?)```", re.S | re.I)


def parse_json_object(text: str) -> dict[str, Any]:
    """The first JSON object in a model reply (think text, fences, prose around it); ValueError."""
    text, thought = strip_think(text or "")
    candidates = [m.group(1) for m in _FENCE.finditer(text)] + [text, thought]
    decoder = json.JSONDecoder()
    for cand in candidates:
        for start in [i for i, ch in enumerate(cand) if ch == "{"][:50]:
            try:
                obj, _ = decoder.raw_decode(cand[start:])
            except ValueError:
                continue
            if isinstance(obj, dict):
                return obj
    raise ValueError("no JSON object in the model's reply")


def compaction_boundary(messages: list[LoggedMessage], retain: int) -> int:
    """How many leading messages to compact: the rest keeps ≥ ``retain``, no call is split."""
    b = len(messages) - max(0, retain)
    if b <= 0:
        return 0
    while 0 < b < len(messages) and messages[b].role == "tool":
        b -= 1  # the first kept message is a result: keep its assistant call too
    return b


def render_transcript(
    messages: list[LoggedMessage], described: dict[str, str] | None = None
) -> str:
    """The part to compact as text; each image as what it shows (``described``, by sha256):
    after the cut the summary stands in for the images it covered."""
    lines = []
    for m in messages:
        content = m.content.strip()
        if m.role == "tool":
            lines.append(f"[tool result] {content[:MAX_TOOL_CHARS]}")
            lines += _image_lines(m, described or {})
            continue
        if content:
            lines.append(f"{m.role}: {content[:MAX_MESSAGE_CHARS]}")
        lines += _image_lines(m, described or {})
        for call in m.tool_calls or []:
            fn = call.get("function") or {}
            args = str(fn.get("arguments", ""))[:MAX_TOOL_CHARS]
            lines.append(f"[{m.role} ran tool {fn.get('name')}({args})]")
    return "\n".join(lines)


def _image_lines(message: LoggedMessage, described: dict[str, str]) -> list[str]:
    who = "a tool returned" if message.role == "tool" else f"the {message.role} sent"
    return [
        f"[{who} an image, {a.name}: {described.get(a.sha256, 'not described')}]"
        for a in message.attachments
        if a.kind == "image"
    ]


class Librarian:
    """Runs compaction/extraction passes in the background, one per session at a time."""

    def __init__(self, memory: Memory, llm: ChatModel, cfg: Config) -> None:
        self.memory = memory
        self.llm = llm
        self.cfg = cfg
        self._running: dict[str, asyncio.Task[None]] = {}
        self._backoff: dict[str, tuple[float, float]] = {}  # session -> (until, delay)

    def maybe_schedule(
        self,
        session_id: str,
        prompt_tokens: int | None,
        *,
        context_tokens: int | None = None,
        overflowed: bool = False,
    ) -> bool:
        """Start a background pass for the session if none runs; True when one started.

        ``context_tokens`` is the context the request really had (the server's own figure
        when it is smaller than ``llm.context_tokens``); ``overflowed`` means the request had
        to be trimmed to fit, so the session is compacted whatever the counts say.
        """
        if session_id in self._running:
            return False
        until, _ = self._backoff.get(session_id, (0.0, 0.0))
        if time.monotonic() < until:
            return False
        limit = min(self.cfg.llm.context_tokens, context_tokens or self.cfg.llm.context_tokens)
        task = asyncio.get_running_loop().create_task(
            self._pass(session_id, prompt_tokens, limit, overflowed),
            name=f"librarian-{session_id}",
        )
        self._running[session_id] = task
        task.add_done_callback(functools.partial(self._done, session_id))
        return True

    def _done(self, session_id: str, task: asyncio.Task[None]) -> None:
        if self._running.get(session_id) is task:
            del self._running[session_id]
        if not task.cancelled() and task.exception() is not None:
            log.error("librarian pass crashed", exc_info=task.exception())

    async def wait_idle(self) -> None:
        """Wait until no pass is running (tests and shutdown)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    async def aclose(self) -> None:
        """Let running passes finish for up to ``CLOSE_GRACE_S``, then cancel them."""
        tasks = list(self._running.values())
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=CLOSE_GRACE_S)
        for t in pending:
            t.cancel()
        await asyncio.gather(*pending, return_exceptions=True)

    # ---- one pass ----------------------------------------------------------------------

    def _needs_pass(
        self, n_messages: int, prompt_tokens: int | None, context_tokens: int, overflowed: bool
    ) -> str | None:
        mc = self.cfg.memory
        if overflowed:
            return "overflow"
        if prompt_tokens is not None and prompt_tokens >= context_tokens * mc.context_threshold:
            return "context"
        if n_messages >= mc.compact_every_messages:
            return "messages"
        return None

    async def _pass(
        self, session_id: str, prompt_tokens: int | None, context_tokens: int, overflowed: bool
    ) -> None:
        mc = self.cfg.memory
        # After every turn: counted, not read (one query), unless a pass is due.
        store = self.memory.store
        previous, cut, count = await asyncio.to_thread(session_log.backlog, store, session_id)
        reason = self._needs_pass(count, prompt_tokens, context_tokens, overflowed)
        if reason is None:
            return
        messages = await self.memory.session_messages(session_id, cut)
        b = compaction_boundary(messages, mc.retain_messages)
        if b <= 0:
            return
        part = messages[:b]
        log_event("librarian", session=session_id, status="start", reason=reason, count=b)
        shas = [a.sha256 for m in part for a in m.attachments if a.kind == "image"]
        described = await self.memory.image_descriptions(shas) if shas else {}
        try:
            result = await self._ask_json(
                SUMMARY_PROMPT,
                f"PREVIOUS SUMMARY:\n{previous or '(none)'}\n\nNEW PART:\n"
                f"{render_transcript(part, described)}",
            )
        except (LLMError, ValueError) as exc:
            self._back_off(session_id, exc)
            return
        if not await asyncio.to_thread(session_log.has_message, store, session_id, part[-1].id):
            log_event("librarian", session=session_id, status="forgotten")
            return  # the user forgot the session while the model read it: nothing is kept
        summary = str(result.get("summary") or "").strip() or (previous or "")
        facts = _clean_facts(result.get("facts"), mc.fact_importance_threshold)
        scope = await self.memory.session_scope(session_id)
        stored = await self._store_facts(facts, session_id, scope)
        await self.memory.set_summary(session_id, summary, part[-1].id)
        self._backoff.pop(session_id, None)
        log_event(
            "librarian",
            session=session_id,
            status="done",
            count=b,
            facts=len(facts),
            stored=stored,
        )

    def _back_off(self, session_id: str, exc: Exception) -> None:
        _, delay = self._backoff.get(session_id, (0.0, BACKOFF_START_S / 2))
        delay = min(BACKOFF_MAX_S, delay * 2)
        self._backoff[session_id] = (time.monotonic() + delay, delay)
        log.warning(
            "librarian: pass failed for session %s (%s); next try in %.0fs", session_id, exc, delay
        )
        log_event("librarian", session=session_id, status="failed", error=str(exc), backoff_s=delay)

    async def _ask_json(self, system: str, user: str) -> dict[str, Any]:
        """One JSON-mode call, retried once with a reminder; ValueError/LLMError on failure."""
        messages = [{"role": "system", "content": system}, {"role": "user", "content": user}]
        last: Exception | None = None
        for attempt in range(2):
            if attempt:
                messages = [*messages, {"role": "user", "content": "Reply with the JSON only."}]
            resp = await self.llm.chat(
                messages,
                temperature=0.2,
                max_tokens=1500,
                response_format={"type": "json_object"},
            )
            try:
                return parse_json_object(resp.content or resp.reasoning)
            except ValueError as exc:
                last = exc
        raise ValueError(f"the model did not return JSON twice: {last}")

    async def _store_facts(self, facts: list[dict[str, Any]], session_id: str, scope: str) -> int:
        fresh: list[tuple[dict[str, Any], list[dict[str, Any]]]] = []
        for fact in facts:
            similar = await self.memory.similar_memories(fact["text"], scope=scope, k=5)
            top = similar[0] if similar else None
            if (
                top is not None
                and top[1] >= self.cfg.memory.dedup_similarity
                and _key_terms(top[0]["text"]) == _key_terms(fact["text"])
            ):
                await self.memory.touch_memory(top[0]["id"], fact["importance"])
                continue
            candidates = [row for row, sim in similar if sim >= SIMILAR_CANDIDATE]
            fresh.append((fact, candidates))
        replaces = await self._ask_replacements(fresh)
        for i, (fact, candidates) in enumerate(fresh):
            new_id = await self.memory.add_memory(
                fact["text"],
                importance=fact["importance"],
                source=fact["speaker"],
                scope=scope,
                session_id=session_id,
            )
            allowed = {row["id"] for row in candidates}
            for old_id in replaces.get(i, []):
                if old_id in allowed:
                    await self.memory.supersede(old_id, new_id)
        return len(fresh)

    async def _ask_replacements(
        self, fresh: list[tuple[dict[str, Any], list[dict[str, Any]]]]
    ) -> dict[int, list[int]]:
        asks = [(i, f, c) for i, (f, c) in enumerate(fresh) if c]
        if not asks:
            return {}
        lines = []
        for i, fact, cands in asks:
            lines.append(f"NEW {i}: {fact['text']}")
            lines.extend(f"  EXISTING id={c['id']}: {c['text']}" for c in cands)
        try:
            result = await self._ask_json(SUPERSEDE_PROMPT, "\n".join(lines))
        except (LLMError, ValueError) as exc:
            log.warning("librarian: could not check contradictions (%s); none superseded", exc)
            return {}
        out: dict[int, list[int]] = {}
        raw = result.get("replaces")
        if isinstance(raw, dict):
            for key, ids in raw.items():
                try:
                    out[int(key)] = [int(x) for x in (ids or [])]
                except (TypeError, ValueError):
                    continue
        return out


_KEY_TERM = re.compile(r"\b(?:[A-Z][\w'-]*|\d[\d.,:/-]*)")


def _key_terms(text: str) -> set[str]:
    """Names and numbers: two facts that differ in them are not duplicates, however similar
    their embeddings ("lives in Porto" vs "lives in Lisbon" is a contradiction to resolve)."""
    return {w.lower().rstrip(".,") for w in _KEY_TERM.findall(text)}


def _clean_facts(raw: Any, threshold: int) -> list[dict[str, Any]]:
    facts = []
    for item in raw if isinstance(raw, list) else []:
        if isinstance(item, str):
            item = {"text": item}
        if not isinstance(item, dict) or not str(item.get("text") or "").strip():
            continue
        try:
            importance = int(item.get("importance", 5))
        except (TypeError, ValueError):
            importance = 5
        importance = min(10, max(1, importance))
        if importance < threshold:
            continue
        speaker = item.get("speaker") if item.get("speaker") in ("user", "assistant") else "user"
        facts.append(
            {"text": str(item["text"]).strip(), "importance": importance, "speaker": speaker}
        )
    return facts


__all__ = ["Librarian", "compaction_boundary", "parse_json_object"]
