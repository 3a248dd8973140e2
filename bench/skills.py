"""What installed skills cost: head tokens and start-up, at 0, 10 and 100 skills.
``python bench/skills.py [--quick] [--runs 3]``

1. **Head tokens.** The session head Luna sends (the system message with its skills index,
   and the tool declarations) rendered by the real llama-server with Luna's Qwen3.5 template
   (``/apply-template``) and counted with its tokenizer (``/tokenize``), for 0, 10 and 100
   installed skills. Each skill has a realistic one-sentence description (80-250 characters);
   a skill's body, files and scripts cost nothing until it is loaded.
2. **Scanning.** ``SkillLibrary.scan`` over 100 installed skills: the first scan (every
   SKILL.md parsed by the skills-ref oracle) and a later one (nothing changed: no file read).
3. **Start-up.** The real ``python -m luna`` with one piped message against the scripted LLM
   server: seconds from start to the first model request, with 0 and with 100 skills
   installed, alternating runs, the median of the runs after the first.

Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.llm_server import FakeLLMServer, Reply  # noqa: E402

COUNTS = (0, 10, 100)
JOBS = (
    "Renews the TLS certificates of the home services and reloads nginx. Use when a "
    "certificate expires soon or the user asks to renew certificates.",
    "Checks last night's backups on the NAS and reports missing or failed ones.",
    "Builds the weekly grocery list from the meal plan in notes/meals.md. Use on Sundays or "
    "when the user asks what to buy.",
    "Summarises the open pull requests of the user's repositories, newest first, with the "
    "checks that fail. Use when the user asks what needs review.",
    "Converts a folder of photos to web-sized JPEGs with ImageMagick.",
    "Writes the monthly electricity report from the smart-meter CSV exports in "
    "~/energy/, with a chart. Use at the start of a month or when asked about power use.",
    "Restarts a stuck container on the homelab and shows its last 50 log lines.",
    "Files a receipt PDF into ~/paperwork/YEAR/ and adds it to the expenses sheet.",
    "Plans a bike route between two places and estimates the time. Use for cycling trips.",
    "Translates a short text into German, keeping the tone. Use when asked to translate.",
)


def write_skills(root: Path, n: int) -> None:
    for i in range(n):
        name = f"job-{i:03d}"
        folder = root / name
        (folder / "scripts").mkdir(parents=True)
        desc = JOBS[i % len(JOBS)]
        body = "# Steps\n\n" + "\n".join(f"{k}. Step {k} of {name}." for k in range(1, 40))
        (folder / "SKILL.md").write_text(f"---\nname: {name}\ndescription: {desc}\n---\n{body}\n")
        (folder / "scripts" / "run.sh").write_text("#!/bin/sh\necho done\n")


def head_tokens(real: Any, base: Path, n: int) -> dict[str, Any]:
    from luna.agent.prompt import build_system_message
    from luna.config import build_config
    from luna.skills.library import SkillLibrary
    from luna.tools import build_registry

    data = base / f"head-{n}" / "data"
    write_skills(data / "skills", n)
    cfg = build_config({"memory": {"db_path": str(data / "luna.db")}}, {}, base_dir=base)
    catalog = SkillLibrary(cfg).scan()
    tools = build_registry(cfg).specs(with_catalog=True)
    system = build_system_message(cfg.agent.system_prompt, None, catalog.index())
    prompt = real.render([system, {"role": "user", "content": "hi"}], tools)
    return {"skills": len(catalog.skills), "head_tokens": len(real.tokenize(prompt))}


def scan_times(base: Path, n: int) -> dict[str, float]:
    from luna.config import build_config
    from luna.skills.library import SkillLibrary

    data = base / "scan" / "data"
    write_skills(data / "skills", n)
    cfg = build_config({"memory": {"db_path": str(data / "luna.db")}}, {}, base_dir=base)
    library = SkillLibrary(cfg)
    started = time.perf_counter()
    first = library.scan()
    cold = time.perf_counter() - started
    started = time.perf_counter()
    library.scan()
    warm = time.perf_counter() - started
    assert len(first.skills) == n + 3, first.left_out  # the three bundled ones too
    return {"first_scan_ms": round(cold * 1000, 1), "later_scan_ms": round(warm * 1000, 2)}


def first_request_s(folder: Path, server: FakeLLMServer) -> float:
    """Start → first model request of ``python -m luna`` with one piped message."""
    stamps: list[float] = []

    def answer(body: dict[str, Any]) -> Reply:
        stamps.append(time.monotonic())
        return Reply(content="ok")

    server.reset()
    server.default = answer
    (folder / "mcp_servers.json").write_text('{"servers": {}}')
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LUNA_", "LLM_"))}
    env.update(
        LLM_ENDPOINT=server.url,
        MEMORY_DB_PATH=str(folder / "data" / "luna.db"),
        LOG_DIR=str(folder / "data" / "logs"),
        LUNA_WORKSPACE=str(folder / "workspace"),
        LUNA_MCP_SERVERS=str(folder / "mcp_servers.json"),
        HF_HUB_OFFLINE="1",
    )
    session = f"bench-{os.urandom(3).hex()}"
    started = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "luna", "--session", session],
        input="hello\n",
        env=env,
        cwd=folder,
        capture_output=True,
        text=True,
        timeout=600,
    )
    if proc.returncode != 0 or not stamps:
        raise SystemExit(f"luna failed: {proc.stderr[-2000:]}")
    return stamps[0] - started


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=4, help="start-up runs per count (first cold)")
    parser.add_argument("--quick", action="store_true", help="2 start-up runs per count")
    args = parser.parse_args()
    runs = 2 if args.quick else max(2, args.runs)
    from tests.real_llama import RealLlama, model_path

    with tempfile.TemporaryDirectory(prefix="luna-skills-bench-") as tmp:
        base = Path(tmp)
        cache = Path(os.environ.get("LUNA_BENCH_MODELS", Path.home() / ".cache" / "luna-bench"))
        real = RealLlama(model_path(cache / "models"), base / "llama.log", template="luna")
        real.start()
        try:
            heads = [head_tokens(real, base, n) for n in COUNTS]
        finally:
            real.stop()
        scans = scan_times(base, 100)
        with FakeLLMServer(n_ctx=131072) as server:
            folders = {n: base / f"start-{n}" for n in (0, 100)}
            for n, folder in folders.items():
                (folder / "data" / "skills").mkdir(parents=True)
                write_skills(folder / "data" / "skills", n)
            starts: dict[int, list[float]] = {0: [], 100: []}
            for _ in range(runs):
                for n, folder in folders.items():
                    starts[n].append(first_request_s(folder, server))
    start_median = {n: round(statistics.median(v[1:]), 3) for n, v in starts.items()}
    base_tokens = heads[0]["head_tokens"]
    print("Installed skills: what the session head costs, and start-up")
    print(f"{'skills':>7}{'head tokens':>13}{'+ per skill':>13}")
    for h in heads:
        extra = h["head_tokens"] - base_tokens
        per = f"{extra / (h['skills'] - 3):.1f}" if h["skills"] > 3 else "—"
        print(f"{h['skills'] - 3:>7}{h['head_tokens']:>13,}{per:>13}")
    print("(plus the 3 skills that ship with Luna in every row)")
    print(f"\nscan of 100 skills: first {scans['first_scan_ms']} ms, later "
          f"{scans['later_scan_ms']} ms (nothing changed)")  # fmt: skip
    print(f"start -> first model request: {start_median[0]} s with 0 skills, "
          f"{start_median[100]} s with 100 (median of {runs - 1} runs)")  # fmt: skip
    result = {
        "benchmark": "skills",
        "head_tokens": {str(h["skills"] - 3): h["head_tokens"] for h in heads},
        "tokens_per_skill": round(
            (heads[-1]["head_tokens"] - base_tokens) / (heads[-1]["skills"] - 3), 1
        ),
        **scans,
        "first_request_s": {str(n): v for n, v in start_median.items()},
        "runs": {str(n): [round(x, 3) for x in v] for n, v in starts.items()},
    }
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
