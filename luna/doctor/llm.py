"""Doctor's LLM checks: endpoint reachable, model alias, context size, vision, tool calls,
reasoning.

Invariant: these speak raw HTTP (httpx), not LLMClient: the client repairs tool calls written
as text and strips ``<think>`` markup, which would hide exactly the server misconfigurations
these checks must show.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import httpx

from luna.config import Config, is_llm_endpoint_explicit
from luna.doctor.result import CheckResult, fail, ok, skipped
from luna.llm.server_info import ServerInfo
from luna.llm.vision import VISION_HINT

LLM_PROBE_TIMEOUT = 120.0  # a real 35B model may think a while before calling the tool
FIX_LLM_START = (
    "start llama-server (`sudo systemctl start worker-agent`, see worker-agent.service) or point "
    "Luna at your server: `luna config set llm.endpoint http://HOST:PORT/v1` or LLM_ENDPOINT=..."
)
PING_TOOL = {
    "type": "function",
    "function": {
        "name": "ping",
        "description": "Check that the assistant can call tools. Always call it when asked.",
        "parameters": {"type": "object", "properties": {}, "required": []},
    },
}


# ---- LLM --------------------------------------------------------------------------------


def _root_url(endpoint: str) -> str:
    """``http://host:8001/v1`` -> ``http://host:8001`` (llama-server serves /props there)."""
    base = endpoint.rstrip("/")
    return base[: -len("/v1")] if base.endswith("/v1") else base


async def _probe(
    client: httpx.AsyncClient, url: str, cfg: Config, body: dict[str, Any]
) -> dict[str, Any]:
    resp = await client.post(url, json=body, timeout=LLM_PROBE_TIMEOUT)
    resp.raise_for_status()
    data = resp.json()
    return (data.get("choices") or [{}])[0].get("message") or {}


async def check_llm(cfg: Config) -> list[CheckResult]:
    """Every model server: the one at llm.endpoint, or each of [[llm.servers]] by name."""
    if not cfg.llm.servers:
        return await check_server(cfg)
    results: list[CheckResult] = []
    for server in cfg.llm.servers:
        update = {
            "endpoint": server.endpoint,
            "model": server.model or cfg.llm.model,
            "api_key": server.api_key,
        }
        one = cfg.model_copy(update={"llm": cfg.llm.model_copy(update=update)})
        roles = ", ".join(server.roles)
        for r in await check_server(one):
            results.append(replace(r, name=f"{r.name} [{server.name}: {roles}]"))
    return results


async def check_server(cfg: Config) -> list[CheckResult]:
    """The checks of one server (``cfg.llm``'s endpoint)."""
    endpoint = cfg.llm.endpoint.rstrip("/")
    headers = {"Authorization": f"Bearer {cfg.llm.api_key}"} if cfg.llm.api_key else {}
    timeout = httpx.Timeout(30.0, connect=cfg.llm.connect_timeout)
    names = (
        "model alias",
        "context size",
        "slots",
        "history reasoning",
        "vision",
        "tool calls",
        "reasoning",
    )
    results: list[CheckResult] = []
    async with httpx.AsyncClient(headers=headers, timeout=timeout) as client:
        # Reachable + model alias.
        try:
            resp = await client.get(f"{endpoint}/models")
        except httpx.TransportError as e:
            why = "timed out" if isinstance(e, httpx.TimeoutException) else type(e).__name__
            detail = f"{endpoint} is unreachable ({why}: {e})"
            if cfg.llm.embedded_fallback and not is_llm_endpoint_explicit(cfg):
                detail += "; `luna` would start its tiny embedded demo model instead"
            results.append(fail("LLM endpoint", detail, FIX_LLM_START))
            return results + [skipped(n, "LLM endpoint unreachable") for n in names]
        if resp.status_code in (401, 403):
            results.append(
                fail(
                    "LLM endpoint",
                    f"{endpoint} refused the API key (HTTP {resp.status_code})",
                    "set LLM_API_KEY (in /etc/luna/luna.env for the service) to the server's "
                    "key (LLAMA_API_KEY in /etc/luna/worker.env)",
                )
            )
            return results + [skipped(n, "API key refused") for n in names]
        if resp.status_code != 200:
            results.append(
                fail(
                    "LLM endpoint",
                    f"{endpoint}/models answered HTTP {resp.status_code}",
                    "check that llm.endpoint is an OpenAI-compatible base URL ending in /v1",
                )
            )
            return results + [skipped(n, "endpoint broken") for n in names]
        try:
            served = [str(m.get("id")) for m in resp.json().get("data", [])]
        except (ValueError, AttributeError):
            served = []
        results.append(ok("LLM endpoint", f"{endpoint} answers"))
        if cfg.llm.model in served:
            results.append(ok("model alias", f"{cfg.llm.model!r} is served"))
        else:
            results.append(
                fail(
                    "model alias",
                    f"{cfg.llm.model!r} is not among the served models {served}",
                    f"set `luna config set llm.model {served[0] if served else 'NAME'}` or "
                    f"start llama-server with --alias {cfg.llm.model}",
                )
            )
        props = await _props(client, cfg)
        results.append(_check_context(props, cfg))
        results.append(_check_slots(props, cfg))
        results.append(_check_template(props, cfg))
        results.append(_check_vision(props))
        results += await _check_probes(client, cfg, endpoint, props)
    return results


async def _props(client: httpx.AsyncClient, cfg: Config) -> dict[str, Any] | None:
    """llama-server's ``/props``, or None (another server, or none)."""
    try:
        resp = await client.get(f"{_root_url(cfg.llm.endpoint)}/props")
        props = resp.json() if resp.status_code == 200 else None
    except (httpx.HTTPError, ValueError):
        return None
    return props if isinstance(props, dict) else None


def _check_slots(props: dict[str, Any] | None, cfg: Config) -> CheckResult:
    """Enough slots that sessions keep their KV cache (llama-server -np)?"""
    slots = (props or {}).get("total_slots")
    if not isinstance(slots, int):
        return skipped("slots", "not a llama-server (no total_slots)")
    if slots < 2 or not cfg.llm.pin_slots:
        why = "one slot" if slots < 2 else "llm.pin_slots is off"
        return fail(
            "slots",
            f"{why}: sessions, sub-agents and the librarian evict each other's KV cache, so "
            "each switch prefills a whole conversation again (bench/slots.py measures it); "
            "images are described only after attachments.describe_after_idle seconds "
            "without a turn",
            "start llama-server with -np N (one slot per conversation you run at once, plus one "
            "for background work) and a host-memory prompt cache, --cache-ram MiB; see "
            "worker-agent.service",
            essential=False,
        )
    return ok(
        "slots",
        f"{slots} slots: {slots - 1} for sessions (pinned, least recent gives way), "
        "1 for background work",
    )


def _check_template(props: dict[str, Any] | None, cfg: Config) -> CheckResult:
    """Does the server's chat template keep the reasoning Luna sends back?"""
    if cfg.llm.history_reasoning != "keep":
        return skipped("history reasoning", f"llm.history_reasoning = {cfg.llm.history_reasoning}")
    caps = (props or {}).get("chat_template_caps")
    if not isinstance(caps, dict):
        return skipped("history reasoning", "not a llama-server (no chat template caps)")
    if caps.get("supports_preserve_reasoning"):
        return ok("history reasoning", "the server's template keeps every turn's reasoning")
    return fail(
        "history reasoning",
        "the server's chat template drops reasoning before the last user message, so each new "
        "turn prefills the previous one again (see `luna doctor cache SESSION`)",
        "run llama-server with --chat-template-file luna/llm/templates/qwen3.5-luna.jinja "
        "(worker-agent.service does), or `luna config set llm.history_reasoning turn`",
        essential=False,
    )


def _check_vision(props: dict[str, Any] | None) -> CheckResult:
    """Can the server see images (llama-server started with --mmproj)?"""
    if props is None:
        return skipped("vision", "not a llama-server (no /props): images are sent as one line")
    if ServerInfo.from_props(props).has_vision:
        return ok("vision", "yes: images go to the model (modalities.vision)")
    return fail(
        "vision",
        "no: this server is text-only, so the model gets one line per image (name and size) "
        "instead of the image",
        VISION_HINT,
        essential=False,
    )


def _check_context(props: dict[str, Any] | None, cfg: Config) -> CheckResult:
    url = f"{_root_url(cfg.llm.endpoint)}/props"
    settings = (props or {}).get("default_generation_settings") or {}
    n_ctx = settings.get("n_ctx") or (props or {}).get("n_ctx")
    if not isinstance(n_ctx, int):
        return fail(
            "context size",
            f"unknown: {url} gave no n_ctx (not llama-server?)",
            f"make sure llm.context_tokens ({cfg.llm.context_tokens}) fits the server's context",
            essential=False,
        )
    slots = (props or {}).get("total_slots")
    slot_note = f", {slots} slot(s)" if isinstance(slots, int) else ""
    if n_ctx < cfg.llm.context_tokens:
        return fail(
            "context size",
            f"server context {n_ctx} tokens{slot_note} < llm.context_tokens "
            f"{cfg.llm.context_tokens}: long sessions will overflow",
            f"start llama-server with -c {cfg.llm.context_tokens} or "
            f"`luna config set llm.context_tokens {n_ctx}`",
            essential=False,
        )
    return ok(
        "context size", f"{n_ctx} tokens{slot_note} (llm.context_tokens {cfg.llm.context_tokens})"
    )


def _no_tool_call_fix(props: dict[str, Any] | None, written: bool) -> str:
    """Why the probe got no tool call, from what llama-server says of its chat template: with
    --jinja, ``/props`` reports ``chat_template_caps`` (``supports_tool_calls`` among them)."""
    caps = (props or {}).get("chat_template_caps")
    can_call = caps.get("supports_tool_calls") if isinstance(caps, dict) else None
    if can_call is None or written:  # no word from the server, or a call it did not parse
        return "start llama-server with --jinja (tool-call parsing needs the model's chat template)"
    if can_call is False:
        return (
            "the model's chat template has no tool calling (a base or non-tool model): load "
            "a tool-calling model such as Qwen3.5, or give one with --chat-template-file"
        )
    return (
        "llama-server parses tool calls (--jinja is on) but the model did not call the tool: "
        "a base or small model that cannot call tools; load an instruction-tuned "
        "tool-calling model such as Qwen3.5"
    )


async def _check_probes(
    client: httpx.AsyncClient, cfg: Config, endpoint: str, props: dict[str, Any] | None
) -> list[CheckResult]:
    url = f"{endpoint}/chat/completions"
    tool_body = {
        "model": cfg.llm.model,
        "messages": [
            {"role": "system", "content": "You are a connectivity test. Use the tools given."},
            {"role": "user", "content": "Call the ping tool now."},
        ],
        "tools": [PING_TOOL],
        "tool_choice": "auto",
        "temperature": 0,
        "max_tokens": 2048,
        "stream": False,
    }
    results: list[CheckResult] = []
    reasoning_seen = ""
    think_markup = False
    try:
        msg = await _probe(client, url, cfg, tool_body)
    except (httpx.HTTPError, ValueError) as e:
        results.append(
            fail(
                "tool calls",
                f"probe request to {url} failed: {type(e).__name__}: {e}",
                "check the llama-server log (`journalctl -u worker-agent`)",
            )
        )
        return results + [skipped("reasoning", "probe request failed")]
    calls = [c.get("function", {}).get("name") for c in msg.get("tool_calls") or []]
    content = str(msg.get("content") or "")
    reasoning_seen = str(msg.get("reasoning_content") or "")
    think_markup = "<think>" in content
    if "ping" in calls:
        results.append(ok("tool calls", "the server returns structured tool_calls"))
    else:
        written = "<tool_call>" in content or '"name"' in content
        results.append(
            fail(
                "tool calls",
                "the probe got no tool_calls"
                + (" (the call was written as text)" if written else f": {content[:80]!r}"),
                _no_tool_call_fix(props, written),
            )
        )
    if not reasoning_seen and not think_markup:
        try:
            msg = await _probe(
                client,
                url,
                cfg,
                {
                    "model": cfg.llm.model,
                    "messages": [{"role": "user", "content": "Think briefly, then say OK."}],
                    "temperature": 0,
                    "max_tokens": 1024,
                    "stream": False,
                },
            )
            reasoning_seen = str(msg.get("reasoning_content") or "")
            think_markup = "<think>" in str(msg.get("content") or "")
        except (httpx.HTTPError, ValueError):
            pass
    if reasoning_seen:
        results.append(ok("reasoning", "thinking arrives as reasoning_content"))
    elif think_markup:
        results.append(
            fail(
                "reasoning",
                "thinking arrives inline as <think> markup in the content",
                "start llama-server with --reasoning-format deepseek",
                essential=False,
            )
        )
    else:
        results.append(
            fail(
                "reasoning",
                "no reasoning_content in the replies (thinking off, or a non-thinking model)",
                "fine for non-thinking models; for Qwen3.5 run llama-server with --jinja "
                "--reasoning-format deepseek",
                essential=False,
            )
        )
    return results
