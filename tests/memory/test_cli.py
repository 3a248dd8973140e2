"""``luna memory`` commands, run through their argparse parser against a real database."""

from __future__ import annotations

import argparse
import json
from collections.abc import Callable
from pathlib import Path

import pytest

from luna.config import Config
from luna.errors import MemoryStoreError
from luna.memory import cli


async def run(cfg: Config, *argv: str) -> int:
    parser = argparse.ArgumentParser(prog="luna")
    cli.add_parser(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["memory", *argv])
    return await args.handler(args, cfg)


@pytest.fixture
def cfg(luna_config: Callable[..., Config], embedder: object) -> Config:
    return luna_config()


async def test_cli_import_skips_malformed_lines_and_keeps_ids(
    cfg: Config, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [
        json.dumps(
            {
                "text": "Caroline: I went to a LGBTQ support group yesterday.",
                "id": "D1:3",
                "created_at": "2023-05-08T13:56:00Z",
                "source": "import",
            }
        ),
        "{not json",
        json.dumps({"id": "x"}),
        json.dumps(["a list"]),
        json.dumps({"text": "bad date", "created_at": "yesterday"}),
        json.dumps({"text": "bad source", "source": "martian"}),
        "",
        json.dumps({"text": "Melanie: I painted a lake sunrise last year.", "id": 7}),
    ]
    path = tmp_path / "in.jsonl"
    path.write_text("\n".join(lines) + "\n")
    assert await run(cfg, "import", str(path)) == 1
    out, err = capsys.readouterr()
    for number in (2, 3, 4, 5, 6):
        assert f"in.jsonl:{number}: skipped" in err
    assert "in.jsonl:1:" not in err and "in.jsonl:8:" not in err
    assert "imported 2, skipped 5" in out
    # Importing again: nothing malformed, the ids already exist.
    path.write_text(lines[0] + "\n")
    assert await run(cfg, "import", str(path)) == 0
    assert "imported 0, skipped 0 malformed line(s), 1 already present" in capsys.readouterr().out

    assert await run(cfg, "search", "support group", "--json", "-k", "1") == 0
    result = json.loads(capsys.readouterr().out)
    assert result["query"] == "support group"
    (hit,) = result["results"]
    assert hit["id"] == "D1:3" and hit["created_at"].startswith("2023-05-08")
    assert "support group" in hit["text"] and isinstance(hit["score"], float)

    batch = tmp_path / "queries.txt"
    batch.write_text("support group\n\nsunrise painting\n")
    assert await run(cfg, "search", "--batch", str(batch), "--json", "-k", "2") == 0
    rows = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [r["query"] for r in rows] == ["support group", "sunrise painting"]
    assert rows[1]["results"][0]["id"] == "7"


async def test_cli_add_list_forget_stats_reindex(
    cfg: Config, capsys: pytest.CaptureFixture[str]
) -> None:
    assert await run(cfg, "add", "The boat is called Aurora", "--importance", "7") == 0
    assert "remembered #1" in capsys.readouterr().out
    assert await run(cfg, "list") == 0
    assert "Aurora" in capsys.readouterr().out
    assert await run(cfg, "search", "what is my boat's name") == 0
    assert "Aurora" in capsys.readouterr().out
    assert await run(cfg, "stats", "--json") == 0
    stats = json.loads(capsys.readouterr().out)
    assert stats["memories"] == 1 and stats["embedded"] == 1
    assert stats["embedding_model"] == "all-MiniLM-L6-v2" and stats["vector_enabled"]
    assert await run(cfg, "reindex") == 0
    captured = capsys.readouterr()
    assert "re-embedded 1 items" in captured.out
    assert "\r" not in captured.err  # not a terminal, and under a second: no bar
    assert await run(cfg, "forget", "1") == 0
    assert await run(cfg, "forget", "1") == 1
    assert await run(cfg, "add", "x", "--importance", "11") == 2
    assert await run(cfg, "search") == 2


async def test_cli_open_memory_closes_the_database_even_when_the_command_fails(
    cfg: Config,
) -> None:
    with pytest.raises(RuntimeError, match="command broke"):
        async with cli.open_memory(cfg) as mem:
            assert await mem.add_memory("kept before the failure") == 1
            raise RuntimeError("command broke")
    with pytest.raises(MemoryStoreError, match="not open"):
        _ = mem.store
    async with cli.open_memory(cfg) as again:  # the file is free and the write was kept
        assert [r["text"] for r in await again.list_memories()] == ["kept before the failure"]
