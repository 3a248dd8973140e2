"""Shared fixtures: hermetic environment, the scripted LLM server, and a Config factory.

Invariants:
- No test sees the developer's Luna environment variables, and Hugging Face stays offline.
- ``llm_server`` is a real HTTP server on 127.0.0.1 (a thread), fresh per test.
- ``luna_config`` builds a Config whose data paths all live under ``tmp_path`` and whose
  ``llm.endpoint`` is the fake server.
- ``real_llama`` starts the real C++ llama-server (Gemma 3 270M rendering Qwen3.5's template)
  on loopback, once per (template, ctx, slots) per session, or fresh on request.
- Every test is marked by what it starts (``pytest_collection_modifyitems``), read from the
  code of the test function and of every fixture it uses, so a new test is marked without a
  decorator: ``real_server`` (a real llama-server: the ``real_llama`` fixture, ``RealLlama(``,
  ``EmbeddedModel(``), ``browser`` (chromium through Playwright: ``browser_page(``) and ``slow``
  (a child process: Luna itself, ``python -m luna web``, tmux, any ``subprocess``, or one Luna
  starts for the test: an MCP server, bash in bubblewrap, the embedding worker, a document's
  conversion, counted for every PDF or Word file a test makes with ``tests/fakes/attachments``
  whether Luna converts it or not; and torch loaded in-process). The fast inner loop is
  ``pytest -m "not real_server and not browser and not slow"``; CI runs them all. Each source
  is searched once (``_earned_by``), so marking 1,700 tests costs about a second.
"""

from __future__ import annotations

import inspect
import os
import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from luna.config import Config, build_config
from luna.config.loader import machine_model_cache
from tests.fakes.llm_server import FakeLLMServer, Reply
from tests.real_llama import RealLlama, model_path

ISOLATED_ENV = (
    "DISCORD_TOKEN",
    "MATRIX_ACCESS_TOKEN",
    "MATRIX_PASSWORD",
    "TELEGRAM_TOKEN",
    "LLM_ENDPOINT",
    "LLM_MODEL",
    "LLM_API_KEY",
    "MEMORY_DB_PATH",
    "LOG_DIR",
    "LUNA_CONFIG",
    "LUNA_WORKSPACE",
    "LUNA_MCP_SERVERS",
    "LUNA_OUTPUTS_DIR",
)

__all__ = ["Reply"]

TESTS = Path(__file__).resolve().parent
# marker -> what, found in the code a test runs (its function and its fixtures), earns it.
STARTS = {
    "real_server": re.compile(r"\breal_llama\b|\bRealLlama\(|\bEmbeddedModel\("),
    "browser": re.compile(r"\bbrowser_page\("),
    "slow": re.compile(
        r"\bsubprocess\.|create_subprocess_(?:exec|shell)\(|\bLunaWebProcess\(|\btmux\b"
        r"|\bos\.fork\(|\bmultiprocessing\."
        # Luna's own parts that start one: MCP stdio servers; bash in bubblewrap (a bash call
        # with its arguments, or scripted for the model) and the sandbox probe; the embedding
        # worker; a document's conversion (documents.convert, or any PDF or Word file made
        # by tests/fakes/attachments.py: wherever a test makes one, Luna may be handed it;
        # the fakes' own ``def`` lines do not count, or naming the word "pdf" would).
        r"|\bMCPManager\(|\bprelaunch\("
        r"|[\"']bash[\"'],\s*(?:\{|json\.|command=)|tool_calls=\[\{[\"']name[\"']:\s*[\"']bash[\"']"
        r"|\bsandbox_status\(|\bprobe=True|\bEmbeddingProcess\b"
        r"|(?<![.\w])convert\(|(?<!def )\b(?:pdf|docx|scanned_pdf)\("
        # and torch, loaded in-process (seconds to tens of seconds)
        r"|backend=[\"']torch[\"']"
    ),
}


_PARTS: dict[int, tuple[str, list[Any]]] = {}


def _source_and_helpers(obj: Any) -> tuple[str, list[Any]]:
    """``obj``'s source and the functions/classes it names (cached: fixtures are shared)."""
    if id(obj) not in _PARTS:
        source, named = "", []
        try:
            if Path(inspect.getsourcefile(obj) or "/").is_relative_to(TESTS):
                source = inspect.getsource(obj)
                names = getattr(obj, "__globals__", None) or vars(inspect.getmodule(obj) or obj)
                words = set(re.findall(r"\b[A-Za-z_]\w*\b", source))
                named = [names[w] for w in words if w in names and callable(names[w])]
        except (OSError, TypeError):
            pass
        _PARTS[id(obj)] = (source, named)
    return _PARTS[id(obj)]


_EARNS: dict[int, frozenset[str]] = {}


def _earned_by(obj: Any) -> frozenset[str]:
    """The markers ``obj``'s own source earns (cached: fixtures and helpers are shared)."""
    if id(obj) not in _EARNS:
        source = _source_and_helpers(obj)[0]
        _EARNS[id(obj)] = frozenset(m for m, pattern in STARTS.items() if pattern.search(source))
    return _EARNS[id(obj)]


def markers_for(item: pytest.Item) -> set[str]:
    """What the code a test runs earns: its function, its fixtures, and the helpers they name,
    transitively (a helper is a function or class defined under tests/ named in the code)."""
    queue: list[Any] = [getattr(item, "function", None)]
    fixture_info = getattr(item, "_fixtureinfo", None)  # pytest's own, stable since 3.x
    for name in getattr(item, "fixturenames", ()):
        for fixture in fixture_info.name2fixturedefs.get(name, ()) if fixture_info else ():
            queue.append(fixture.func)
    seen: set[int] = set()
    earned: set[str] = set()
    while queue:
        obj = queue.pop()
        if id(obj) not in seen:
            seen.add(id(obj))
            earned |= _earned_by(obj)
            queue.extend(_source_and_helpers(obj)[1])
    return earned


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        for marker in sorted(markers_for(item)):
            item.add_marker(marker)


@pytest.fixture(autouse=True)
def _isolated_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ISOLATED_ENV:
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture
def llm_server() -> Iterator[FakeLLMServer]:
    """The scripted OpenAI-compatible server: ``.url``, ``.script(...)``, ``.requests``."""
    with FakeLLMServer() as server:
        yield server


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    out = {k: dict(v) if isinstance(v, dict) else v for k, v in base.items()}
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _merge(out[key], value)
        else:
            out[key] = value
    return out


# The machine's prepared embedding model, where Luna finds it by default (``.ci/install``
# prepares it): without it, every test's new data folder would export a copy of its own (20-30 s
# of CPU each, and a turn waiting on it).
_MACHINE_MODELS = machine_model_cache(dict(os.environ))
PREPARED_MODEL = {"model_cache": str(_MACHINE_MODELS)} if _MACHINE_MODELS else {}


@pytest.fixture
def luna_config(tmp_path: Path, llm_server: FakeLLMServer) -> Callable[..., Config]:
    """Factory: ``luna_config({"agent": {"max_rounds": 3}}, env={...}) -> Config``."""

    def make(data: dict[str, Any] | None = None, env: dict[str, str] | None = None) -> Config:
        base = {
            "llm": {
                "endpoint": llm_server.url,
                "model": llm_server.model,
                "timeout": 30.0,
                "connect_timeout": 5.0,
                "max_retries": 2,
                "retry_backoff": 0.01,
                "loading_poll": 0.01,
            },
            "memory": {"db_path": str(tmp_path / "data" / "luna.db"), **PREPARED_MODEL},
            "observe": {"log_dir": str(tmp_path / "data" / "logs"), "console": False},
            "agent": {"workspace": str(tmp_path / "workspace")},
            "tools": {"outputs_dir": str(tmp_path / "data" / "tool_outputs")},
            "mcp": {"servers_file": str(tmp_path / "mcp_servers.json")},
        }
        return build_config(_merge(base, data or {}), dict(env or {}), base_dir=tmp_path)

    return make


@pytest.fixture(scope="session")
def real_llama(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Callable[..., RealLlama]]:
    """``real_llama(template="stock"|"luna", ctx=8192, slots=1, fresh_server=False,
    swa_full=False, vision=False) -> RealLlama``; servers run without --swa-full unless asked
    (see tests/real_llama.py), and a --swa-full one is never shared; ``vision=True`` adds the
    tiny vision projector (--mmproj), ``vision="qwen3.5"`` the one with Qwen3.5's geometry."""
    base = tmp_path_factory.mktemp("llama-server")
    model = model_path(base / "models")
    shared: dict[tuple[str, int, int, bool | str], RealLlama] = {}
    fresh: list[RealLlama] = []

    def get(
        template: str = "stock",
        ctx: int = 8192,
        slots: int = 1,
        *,
        fresh_server: bool = False,
        swa_full: bool = False,
        vision: bool | str = False,
    ) -> RealLlama:
        key = (template, ctx, slots, vision)
        if fresh_server or swa_full or key not in shared:
            seeing = f"-vision-{vision}" if vision else ""
            # Numbered over every server started, shared or fresh: each has a log of its own
            # (a test counts what its server logged).
            name = f"{template}-{ctx}-{slots}{seeing}-{len(fresh) + len(shared)}"
            server = RealLlama(
                model,
                base / f"llama-{name}.log",
                template=template,
                ctx=ctx,
                slots=slots,
                swa_full=swa_full,
                vision=vision,
            ).start()
            if not (fresh_server or swa_full):
                shared[key] = server
            else:
                fresh.append(server)
            return server
        return shared[key]

    yield get
    for server in [*shared.values(), *fresh]:
        server.stop()
