"""The tool registry: one place where tools are defined, described, checked and run.

A native tool is a plain async function registered with :meth:`ToolRegistry.tool`; its JSON
schema comes from the type hints and the Google-style docstring (``Args:`` section), through
:func:`luna.tools.schema.schema_from_function`, so the definition lives in one place. MCP
tools arrive through :meth:`ToolRegistry.register` with a schema of their own.

Invariants:
- :meth:`ToolRegistry.execute` never raises except ``CancelledError``: an unknown name, bad JSON,
  a schema mismatch, a denied permission, a ``ToolError``, a timeout or a bug all come back as
  an error ``ToolResult`` written for the model (bugs also log a traceback for the operator).
- Arguments are validated against the tool's JSON schema (``jsonschema``, native and MCP tools
  alike) before the handler runs; the handler gets them as the model sent them.
- Configured secret values (``secret_values(cfg)``) are replaced by ``***`` in every output.
- Every output a tool produced goes through :func:`luna.tools.output.shape_output` and is
  wrapped by :func:`luna.tools.untrusted.wrap_untrusted`; the registry's own messages are not.
- ``specs()`` order is stable: native tools in registration order, then the rest by name.
- A name that is not registered is first offered to the provider that owns it (the MCP
  manager owns ``server__tool``): it may bring its source back, or says why it is not running.
"""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import json
import logging
import time
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, TypeVar, overload

import jsonschema

from luna import observe
from luna.config import Config, PermissionLevel, secret_values
from luna.errors import ToolError, did_you_mean
from luna.messages import Approver, Frontend, ToolCall, ToolResult
from luna.tools.contract import SchedulerPort, ToolProvider
from luna.tools.output import shape_output
from luna.tools.permissions import resolve_level
from luna.tools.sandbox import NOT_CHECKED, SandboxStatus
from luna.tools.schema import schema_from_function
from luna.tools.untrusted import wrap_untrusted

if TYPE_CHECKING:  # only their types here (the library is made by tools.builtin.skills)
    from luna.llm.contract import ChatModel
    from luna.skills.library import SkillLibrary

log = logging.getLogger(__name__)

SubAgentRunner = Callable[[str, "list[str] | None", "Path | None"], Awaitable[str]]
Handler = Callable[[dict[str, Any], "ToolContext"], Awaitable["ToolResult | str"]]
# A native tool: an async function whose parameters are its JSON schema (and maybe ``ctx``).
ToolFn = TypeVar("ToolFn", bound=Callable[..., Awaitable["ToolResult | str"]])
Expose = Literal["direct", "catalog"]

DEFAULT_TOOL_TIMEOUT = 300.0
CATALOG_TOOLS = ("list_available_tools", "use_tool")


@dataclass
class ToolContext:
    """What a tool may know about the turn that called it."""

    session_id: str
    frontend: Frontend
    user_request: str  # the user's text, for large-output keyword filtering
    approver: Approver | None  # asks the owner; None => 'ask' tools are denied
    llm: ChatModel | None  # for tools' own model calls (extraction); None: none
    run_subagent: SubAgentRunner | None  # async (task, tool_names, workdir) -> str
    depth: int = 0  # sub-agents have depth 1 and cannot spawn more
    workdir: Path | None = None  # a sub-agent's folder: bash and relative paths start there
    user_id: str = "owner"  # who is talking: "owner" or a Discord user id
    scope: str = "owner"  # their memory scope
    address: dict[str, Any] | None = None  # where a later answer goes (InboundMessage.address)
    allowed_tools: frozenset[str] | None = None  # None: all; else only these may run
    declared: frozenset[str] | None = None  # the session head's tools (None: not known)
    narrowed_by: str = ""  # the skill whose allowed-tools narrowed allowed_tools this turn
    # Shows a line about a long call's progress (a Status of kind "progress"); None: nowhere.
    on_progress: Callable[[str], None] | None = None


@dataclass
class ToolInfo:
    name: str
    description: str
    parameters: dict[str, Any]
    handler: Handler
    level: PermissionLevel = "ask"
    expose: Expose = "direct"
    native: bool = False
    timeout: float | None = DEFAULT_TOOL_TIMEOUT
    guest: bool = False  # offered even to people without tool rights (see guest_names)
    validator: Any = field(default=None, repr=False)

    def spec(self) -> dict[str, Any]:
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }


class ToolRegistry:
    """Holds native and MCP tools; validates, permits, runs and shapes every call."""

    def __init__(self, cfg: Config, *, sandbox: SandboxStatus = NOT_CHECKED) -> None:
        self.cfg = cfg
        self._tools: dict[str, ToolInfo] = {}
        # Whether bash runs inside bubblewrap (``build_registry`` checks it once).
        self.sandbox = sandbox
        # Levels forced at start-up: bash without a sandbox is always 'ask' (unless 'deny').
        self.forced_levels: dict[str, PermissionLevel] = {}
        # Running parts some tools call, bound once they exist; a tool whose part is missing
        # says so to the model. The scheduler binds its port when it starts (tools never
        # import the scheduler); the skill library is made with the skill tools.
        self.scheduler: SchedulerPort | None = None
        self.skills: SkillLibrary | None = None
        # Sources of tools registered at run time (MCP servers), asked about names they own.
        self.providers: list[ToolProvider] = []
        if not sandbox.ok:
            self.forced_levels["bash"] = "ask"

    # ---- registration -----------------------------------------------------------------

    @overload
    def tool(
        self,
        fn: ToolFn,
        *,
        name: str | None = None,
        level: PermissionLevel = "allow",
        expose: Expose = "direct",
        timeout: float | None = DEFAULT_TOOL_TIMEOUT,
        guest: bool = False,
    ) -> ToolFn: ...

    @overload
    def tool(
        self,
        fn: None = None,
        *,
        name: str | None = None,
        level: PermissionLevel = "allow",
        expose: Expose = "direct",
        timeout: float | None = DEFAULT_TOOL_TIMEOUT,
        guest: bool = False,
    ) -> Callable[[ToolFn], ToolFn]: ...

    def tool(
        self,
        fn: ToolFn | None = None,
        *,
        name: str | None = None,
        level: PermissionLevel = "allow",
        expose: Expose = "direct",
        timeout: float | None = DEFAULT_TOOL_TIMEOUT,
        guest: bool = False,
    ) -> ToolFn | Callable[[ToolFn], ToolFn]:
        """Decorator: register an async function; a parameter named ``ctx`` gets the context.

        ``guest=True`` offers the tool even in turns without tool rights (a stranger's), where
        it is the only kind that may run; it must check ``ctx.user_id`` itself.
        """

        def wrap(f: ToolFn) -> ToolFn:
            description, parameters = schema_from_function(f)
            wants_ctx = "ctx" in inspect.signature(f).parameters

            async def handler(arguments: dict[str, Any], ctx: ToolContext) -> ToolResult | str:
                if wants_ctx:
                    return await f(ctx=ctx, **arguments)
                return await f(**arguments)

            self._add(
                ToolInfo(
                    name=name or f.__name__,
                    description=description,
                    parameters=parameters,
                    handler=handler,
                    level=level,
                    expose=expose,
                    native=True,
                    timeout=timeout,
                    guest=guest,
                )
            )
            return f

        return wrap(fn) if fn is not None else wrap

    def register(
        self,
        name: str,
        description: str,
        parameters: dict[str, Any],
        handler: Handler,
        *,
        level: PermissionLevel = "ask",
        expose: Expose = "direct",
        timeout: float | None = None,
    ) -> str:
        """Register a tool defined elsewhere (MCP); returns the name used."""
        params = parameters if isinstance(parameters, dict) else {}
        params = {"type": "object", "properties": {}, **params}
        self._add(ToolInfo(name, description or "", params, handler, level, expose, False, timeout))
        return name

    def _add(self, info: ToolInfo) -> None:
        try:
            cls = jsonschema.validators.validator_for(info.parameters)
            cls.check_schema(info.parameters)
            info.validator = cls(info.parameters)
        except jsonschema.SchemaError as e:
            log.warning(
                "tool %s has an invalid schema (%s); arguments not validated", info.name, e.message
            )
            info.validator = None
        self._tools[info.name] = info

    def unregister_prefix(self, prefix: str) -> None:
        for name in [n for n in self._tools if n.startswith(prefix)]:
            del self._tools[name]

    # ---- lookup -----------------------------------------------------------------------

    def get(self, name: str) -> ToolInfo | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return [i.name for i in self._ordered()]

    def _ordered(self) -> list[ToolInfo]:
        native = [i for i in self._tools.values() if i.native]
        other = sorted((i for i in self._tools.values() if not i.native), key=lambda i: i.name)
        return native + other

    def specs(
        self, *, names: Iterable[str] | None = None, with_catalog: bool = False
    ) -> list[dict[str, Any]]:
        """OpenAI tool specs: direct tools (or exactly ``names``), in a stable order. The
        catalog tools are in it when there is a catalog, or always ``with_catalog``."""
        if names is not None:
            wanted = set(names)
            return [i.spec() for i in self._ordered() if i.name in wanted]
        has_catalog = with_catalog or bool(self.catalog())
        return [
            i.spec()
            for i in self._ordered()
            if i.expose == "direct" and (has_catalog or i.name not in CATALOG_TOOLS)
        ]

    async def settle(self) -> list[str]:
        """Wait for tools still arriving from every provider; lines for what is left out."""
        lines = await asyncio.gather(*(p.settle() for p in self.providers))
        return [line for group in lines for line in group]

    def catalog(self) -> list[ToolInfo]:
        return [i for i in self._ordered() if i.expose == "catalog"]

    def tools(self) -> list[ToolInfo]:
        """Every registered tool, in ``specs()`` order."""
        return self._ordered()

    def guest_names(self) -> list[str]:
        """Tools offered in turns without tool rights (registered with ``guest=True``)."""
        return [i.name for i in self._ordered() if i.guest]

    def suggest(self, name: str) -> str:
        """For an unknown ``name``: ``" (did you mean 'x'?)"``, else ``". Available tools: …"``."""
        hint = did_you_mean(name, self._tools, n=3, cutoff=0.5)
        return hint or ". Available tools: " + ", ".join(self.names())

    def level_for(self, info: ToolInfo, frontend: str) -> PermissionLevel:
        forced = self.forced_levels.get(info.name)
        level = resolve_level(self.cfg.tools, info.name, frontend, info.level)
        if forced is not None and level != "deny":
            return forced
        return level

    # ---- execution --------------------------------------------------------------------

    async def execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        """Run one tool call; always returns a ToolResult (see the module invariants)."""
        started = time.perf_counter()
        result = await self._execute(call, ctx)
        observe.log_event(
            "tool_run",
            tool=call.name,
            duration_ms=round((time.perf_counter() - started) * 1000, 1),
            is_error=result.is_error,
            output_bytes=len(result.content.encode("utf-8", "replace")),
        )
        return result

    async def _execute(self, call: ToolCall, ctx: ToolContext) -> ToolResult:
        info = self._tools.get(call.name)
        if ctx.allowed_tools is not None and call.name not in ctx.allowed_tools:
            offered = ", ".join(sorted(ctx.allowed_tools)) or "none"
            if ctx.narrowed_by:
                return ToolResult(
                    f"'{call.name}' is not allowed while {ctx.narrowed_by} is in use (its "
                    f"allowed-tools); this turn may use: {offered}.",
                    True,
                )
            return ToolResult(f"Unknown tool '{call.name}'. Available tools: {offered}.", True)
        if info is None:
            info, missing = await self._revive(call.name)
            if info is None:
                return ToolResult(missing, True)
        args, problem = parse_arguments(call.arguments)
        if problem:
            return ToolResult(f"{call.name}: {problem}. {usage_hint(info)}", True)
        return await self.run(info, args, ctx, shape=True)

    async def _revive(self, name: str) -> tuple[ToolInfo | None, str]:
        """(the tool, "") once its provider has it back, else (None, why it is missing)."""
        owner = next((p for p in self.providers if p.owns(name)), None)
        problem = await owner.revive(name) if owner is not None else None
        info = self._tools.get(name)
        if info is not None:
            return info, ""
        return None, problem or f"Unknown tool '{name}'{self.suggest(name)}."

    async def run(
        self, info: ToolInfo, args: dict[str, Any], ctx: ToolContext, *, shape: bool
    ) -> ToolResult:
        """Validate, check permission, run and (when ``shape``) shape and wrap one call."""
        problem = self.validate(info, args)
        if problem:
            return ToolResult(f"{info.name}: {problem}. {usage_hint(info)}", True)
        refusal = await self.check_permission(info, args, ctx)
        if refusal:
            return ToolResult(refusal, True)
        try:
            async with asyncio.timeout(info.timeout):
                raw = await info.handler(args, ctx)
        except ToolError as e:
            raw = ToolResult(f"Error: {e}", True)
        except TimeoutError:
            raw = ToolResult(f"Error: {info.name} timed out after {info.timeout:g} s", True)
        except Exception as e:  # a tool bug must not end the turn
            log.exception("tool %s crashed", info.name)
            raw = ToolResult(f"Error: {info.name} failed unexpectedly ({type(e).__name__})", True)
        result = raw if isinstance(raw, ToolResult) else ToolResult(str(raw), False)
        for secret in secret_values(self.cfg):
            if secret in result.content:
                result = dataclasses.replace(result, content=result.content.replace(secret, "***"))
        if not shape or (result.trusted and info.native):
            return result
        text = await shape_output(
            result.content,
            tool=info.name,
            user_request=ctx.user_request,
            cfg=self.cfg,
            llm=ctx.llm,
        )
        return ToolResult(wrap_untrusted(text, info.name), result.is_error, media=result.media)

    def validate(self, info: ToolInfo, args: dict[str, Any]) -> str | None:
        if info.validator is None:
            return None
        errors = sorted(info.validator.iter_errors(args), key=lambda e: list(e.path))
        if not errors:
            return None
        first = errors[0]
        where = ".".join(str(p) for p in first.path)
        return f"invalid arguments ({where + ': ' if where else ''}{first.message})"

    async def check_permission(
        self, info: ToolInfo, args: dict[str, Any], ctx: ToolContext
    ) -> str | None:
        """None when the call may run, else the refusal message for the model."""
        level = self.level_for(info, ctx.frontend)
        if level == "allow":
            return None
        if level == "deny":
            return f"{info.name} is disabled by the owner's configuration; do not retry it."
        if ctx.approver is None:
            return f"{info.name} needs the owner's approval, and nobody can approve here."
        try:
            async with asyncio.timeout(self.cfg.tools.approval_timeout):
                approved = await ctx.approver(info.name, args)
        except TimeoutError:
            return f"The owner did not approve {info.name} in time; it was not run."
        if not approved:
            return f"The owner declined {info.name}; it was not run."
        return None


# ---- helpers --------------------------------------------------------------------------


def parse_arguments(raw: str | None) -> tuple[dict[str, Any], str | None]:
    """(arguments, None) or ({}, what is wrong) for the raw JSON text the model produced."""
    if raw is None or not raw.strip():
        return {}, None
    try:
        value = json.loads(raw)
    except json.JSONDecodeError as e:
        return {}, f"arguments are not valid JSON ({e.msg} at position {e.pos})"
    if not isinstance(value, dict):
        return {}, "arguments must be a JSON object"
    return value, None


def usage_hint(info: ToolInfo) -> str:
    props = info.parameters.get("properties", {})
    required = set(info.parameters.get("required", []))
    parts = []
    for pname, p in props.items():
        kind = p.get("type", "any")
        parts.append(f"{pname}: {kind}{'' if pname in required else ' (optional)'}")
    return "Expected a JSON object {" + ", ".join(parts) + "}"
