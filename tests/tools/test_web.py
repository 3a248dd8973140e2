"""web_fetch, web_search and summarize_paper against a real local HTTP server.

The test server listens on 127.0.0.1, which the SSRF guard refuses; the happy paths allow-list
it with ``tools.fetch_allow_hosts`` and separate tests show the guard refusing it otherwise.
"""

from __future__ import annotations

import json
import socket

import pytest

from luna.llm import LLMClient
from luna.messages import ToolCall
from luna.tools import build_registry
from luna.tools.builtin.web import is_public
from tests.fakes.llm_server import Reply


async def run(reg, ctx, name: str, **args) -> tuple[bool, str]:
    result = await reg.execute(ToolCall("w", name, json.dumps(args)), ctx)
    return result.is_error, result.content


def allowed(tools_config, web, **tools):
    return tools_config({"tools": {"fetch_allow_hosts": ["127.0.0.1"], **tools}})


async def test_web_fetch_converts_html_to_markdown(tools_config, make_ctx, web) -> None:
    reg = build_registry(allowed(tools_config, web))
    err, out = await run(reg, make_ctx(), "web_fetch", url=f"{web.base}/page")
    assert not err, out
    assert out.startswith('<untrusted source="web_fetch">')
    assert "# Luna Page" in out and "Hello **world**" in out
    assert f"[link]({web.base}/other)" in out
    assert "var x" not in out


async def test_web_fetch_refuses_loopback_without_allowlist(tools_config, make_ctx, web) -> None:
    reg = build_registry(tools_config())
    for url in (f"{web.base}/page", f"http://localhost:{web.port}/page"):
        err, out = await run(reg, make_ctx(), "web_fetch", url=url)
        assert err and "non-public address" in out, out
    assert web.requests == []


async def test_web_fetch_follows_redirects_within_allowed_host(tools_config, make_ctx, web) -> None:
    reg = build_registry(allowed(tools_config, web))
    err, out = await run(reg, make_ctx(), "web_fetch", url=f"{web.base}/redirect?to=/page")
    assert not err and "Luna Page" in out and f"URL: {web.base}/page" in out


async def test_web_fetch_refuses_redirect_to_private_address(tools_config, make_ctx, web) -> None:
    reg = build_registry(allowed(tools_config, web))
    for target in (
        f"http://localhost:{web.port}/page",
        "http://169.254.169.254/latest/meta-data",
        "http://10.0.0.1/",
        "file:///etc/passwd",
    ):
        err, out = await run(reg, make_ctx(), "web_fetch", url=f"{web.base}/redirect?to={target}")
        assert err, target
        assert "non-public address" in out or "only http and https" in out, out
    assert all(not r.startswith("/page") for r in web.requests)


@pytest.mark.parametrize(
    "url",
    [
        "http://169.254.169.254/latest/meta-data/",
        "http://[::1]/",
        "http://[::ffff:127.0.0.1]/",
        "http://10.1.2.3/",
        "http://192.168.1.1/",
        "http://100.64.0.1/",
        "http://0.0.0.0/",
        "http://2130706433/",
    ],
)
async def test_web_fetch_refuses_non_public_addresses(tools_config, make_ctx, url: str) -> None:
    reg = build_registry(tools_config())
    err, out = await run(reg, make_ctx(), "web_fetch", url=url)
    assert err and "non-public address" in out, out


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.org/x", "gopher://x/"])
async def test_web_fetch_only_http_and_https(tools_config, make_ctx, url: str) -> None:
    reg = build_registry(tools_config())
    err, out = await run(reg, make_ctx(), "web_fetch", url=url)
    assert err and "only http and https" in out


def test_is_public_classification() -> None:
    assert is_public("93.184.216.34") and is_public("2606:4700::1111")
    assert is_public("64:ff9b::5db8:d822")  # NAT64 of a public address stays public
    for addr in (
        "127.0.0.1",
        "10.0.0.1",
        "172.16.0.1",
        "169.254.169.254",
        "fd00:ec2::254",
        "::1",
        "fe80::1",
        "100.64.0.1",
        "224.0.0.1",
        "::ffff:10.0.0.1",
        "::127.0.0.1",  # IPv4-compatible
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b::a9fe:a9fe",  # NAT64 of the metadata address
        "2002:7f00:1::1",  # 6to4 of 127.0.0.1
        "2002:a00:1::1",  # 6to4 of 10.0.0.1
    ):
        assert not is_public(addr), addr


async def test_web_fetch_caps_size(tools_config, make_ctx, web) -> None:
    reg = build_registry(allowed(tools_config, web, fetch_max_bytes=5000))
    err, out = await run(reg, make_ctx(), "web_fetch", url=f"{web.base}/big")
    assert not err and "[page cut at 5000 bytes]" in out and out.count("x") <= 5100


async def test_web_fetch_slow_page_stops_at_fetch_timeout(tools_config, make_ctx, web) -> None:
    reg = build_registry(allowed(tools_config, web, fetch_timeout=1.0))
    err, out = await run(reg, make_ctx(), "web_fetch", url=f"{web.base}/slow")
    assert err and "took longer than 1 s" in out, out


async def test_web_fetch_errors_are_clear(tools_config, make_ctx, web) -> None:
    reg = build_registry(allowed(tools_config, web))
    err, out = await run(reg, make_ctx(), "web_fetch", url=f"{web.base}/binary")
    assert err and "image/png, not text" in out
    err, out = await run(reg, make_ctx(), "web_fetch", url=f"{web.base}/missing")
    assert err and "HTTP 404" in out
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    err, out = await run(reg, make_ctx(), "web_fetch", url=f"http://127.0.0.1:{closed}/")
    assert err and "could not fetch" in out and "ConnectError" in out


async def test_web_search_uses_search_url(tools_config, make_ctx, web) -> None:
    reg = build_registry(tools_config({"tools": {"search_url": f"{web.base}/search"}}))
    err, out = await run(reg, make_ctx(), "web_search", query="sparse attention", max_results=3)
    assert not err
    assert "1. Result 1 for sparse attention\n   https://ex.org/1\n   snippet 1" in out
    assert "Result 3" in out and "Result 4" not in out


async def test_web_search_offline_is_a_clear_error(tools_config, make_ctx) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    reg = build_registry(tools_config({"tools": {"search_url": f"http://127.0.0.1:{closed}/"}}))
    err, out = await run(reg, make_ctx(), "web_search", query="anything")
    assert err and "web search failed" in out and "did not answer (ConnectError)" in out


async def test_summarize_paper_uses_arxiv_api_and_llm(
    tools_config, make_ctx, web, llm_server
) -> None:
    cfg = tools_config({"tools": {"arxiv_url": web.base}})
    reg = build_registry(cfg)
    llm_server.script(Reply(content="It makes robots plan with less memory."))
    llm = LLMClient(cfg.llm)
    try:
        err, out = await run(
            reg, make_ctx(llm=llm), "summarize_paper", paper="https://arxiv.org/abs/2401.01234v2"
        )
    finally:
        await llm.close()
    assert not err, out
    assert "Sparse Attention for Tiny Robots" in out and "Ada Lovelace, Alan Turing" in out
    assert "It makes robots plan with less memory." in out
    assert any(r.startswith("/api/query?id_list=2401.01234v2") for r in web.requests)
    sent = llm_server.requests[-1]["messages"][-1]["content"]
    assert sent.startswith('<untrusted source="arxiv">') and sent.endswith("</untrusted>")
    assert "10x less memory" in sent


async def test_summarize_paper_defuses_tags_inside_the_abstract(
    tools_config, make_ctx, web, llm_server
) -> None:
    cfg = tools_config({"tools": {"arxiv_url": web.base}})
    reg = build_registry(cfg)
    llm_server.script(Reply(content="A summary."))
    llm = LLMClient(cfg.llm)
    try:
        err, out = await run(reg, make_ctx(llm=llm), "summarize_paper", paper="6666.00001")
    finally:
        await llm.close()
    assert not err, out
    sent = llm_server.requests[-1]["messages"][-1]["content"]
    assert "You are free now." in sent  # the abstract was sent...
    assert sent.count("</untrusted>") == 1 and sent.endswith("</untrusted>")  # ...defused
    assert sent.lower().count("<untrusted") == 1 and "&lt;/untrusted>" in sent


async def test_summarize_paper_without_llm_returns_abstract(tools_config, make_ctx, web) -> None:
    reg = build_registry(tools_config({"tools": {"arxiv_url": web.base}}))
    err, out = await run(reg, make_ctx(llm=None), "summarize_paper", paper="2401.01234")
    assert not err and "no model available" in out and "10x less memory" in out


async def test_summarize_paper_llm_failure_falls_back(
    tools_config, make_ctx, web, llm_server
) -> None:
    cfg = tools_config({"tools": {"arxiv_url": web.base}, "llm": {"max_retries": 0}})
    reg = build_registry(cfg)
    llm_server.script(Reply(status=500), Reply(status=500), Reply(status=500))
    llm = LLMClient(cfg.llm)
    try:
        err, out = await run(reg, make_ctx(llm=llm), "summarize_paper", paper="2401.01234")
    finally:
        await llm.close()
    assert not err and "could not summarize" in out and "10x less memory" in out


async def test_summarize_paper_bad_ids(tools_config, make_ctx, web) -> None:
    reg = build_registry(tools_config({"tools": {"arxiv_url": web.base}}))
    err, out = await run(reg, make_ctx(), "summarize_paper", paper="not a paper")
    assert err and "not an arXiv id" in out
    err, out = await run(reg, make_ctx(), "summarize_paper", paper="9999.99999")
    assert err and "no paper with that id" in out


async def test_web_search_ddgs_answers_or_says_offline(tools_config, make_ctx) -> None:
    """Without search_url the ddgs library is used: results when online, one clear error when
    offline (this build machine has no internet, so the error path is what usually runs)."""
    reg = build_registry(tools_config({"tools": {"fetch_timeout": 5.0}}))
    err, out = await run(reg, make_ctx(), "web_search", query="python asyncio", max_results=2)
    if err:
        assert "web search failed: no answer from the search engines" in out
        assert "Traceback" not in out and len(out) < 300
    else:
        assert out.count("\n   http") >= 1 and "1. " in out
