"""Cold start, footprint and per-turn cost of the real ``python -m luna``, beside a baseline.
``python bench/cold_start.py [--runs 5] [--turns 24] [--baseline aac7ca3] [--quick]``

Each run starts Luna the way a user does, with the scripted LLM server (``tests/fakes``, in a
thread here, answering at once) as its endpoint and the tree's own config.toml and
mcp_servers.json (so the MCP time server starts too):

1. on a pseudo-terminal, until the REPL shows its ``you>`` prompt (then Ctrl-D);
2. with stdin piped, in a new session (``--session``): one message, then (once the process tree
   is idle) the RSS of every process of the tree, then ``--turns`` + 1 more messages at once;
   the server stamps each turn's request.

A third version is the current code with no MCP server configured (an empty servers file):
the difference in "first model request" is what the shipped time server adds, since a
session's first turn waits for the MCP servers still starting (luna.agent.head). A fourth is
the current code on a new data folder at every run ("new folder"): what a script, a cron job or
a new user pays, with the embedding model prepared in the machine's cache (``.ci/install``
prepares it; ``luna memory prepare`` by hand) and a first recall that waits for its load.

Figures: start → REPL prompt; start → first model request; p50/p95 of the gap between
consecutive turns' model requests; RSS (and peak RSS) of each process after the first turn.
Runs alternate between the baseline and the current code, so noise hits both; each figure is the
median over the runs after the first (the new-folder version: over all its runs). The first run
of each starts on an empty data folder and is reported on its own.

The baseline is another commit (default aac7ca3, before the cold-start work) checked out as a
``git worktree`` under the bench cache (``~/.cache/luna-bench``, or ``--cache``) and run by its
own venv there: the current requirements.lock plus what that commit imports and the lock no
longer has (``BASELINE_EXTRA``). Prints a table and one JSON line.
"""

from __future__ import annotations

import argparse
import json
import os
import pty
import select
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.fakes.llm_server import FakeLLMServer, Reply  # noqa: E402

DEFAULT_BASELINE = "aac7ca3"
BASELINE_EXTRA = ["tomli-w==1.2.0"]  # aac7ca3's luna/config_cli.py imports tomli_w
DEFAULT_CACHE = Path.home() / ".cache" / "luna-bench"
START_TIMEOUT = 180.0
IDLE_CPU_S = 0.03  # the tree used less than this much CPU over IDLE_WINDOW_S: it is idle
IDLE_WINDOW_S = 1.0
IDLE_TIMEOUT = 120.0
CLK_TCK = os.sysconf("SC_CLK_TCK")
TURN_MARK = "[bench turn]"
GOALS = {"first_request_s": 2.0, "gap_p50_ms": 20.0, "worker_rss_mb": 250.0, "main_rss_mb": 120.0}


@dataclass(frozen=True)
class Version:
    name: str
    python: Path
    tree: Path
    mcp_servers: Path | None = None  # LUNA_MCP_SERVERS; None: the tree's mcp_servers.json
    new_folder: bool = False  # a new data folder at every run


def _run(cmd: list[str], **kw: Any) -> str:
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kw).stdout


def ensure_baseline(rev: str, cache: Path) -> Version:
    """A worktree of ``rev`` and a venv for it under ``cache`` (made once, then reused)."""
    sha = _run(["git", "rev-parse", "--short", rev], cwd=ROOT).strip()
    tree, venv = cache / f"tree-{sha}", cache / f"venv-{sha}"
    if not (tree / "luna").is_dir():
        cache.mkdir(parents=True, exist_ok=True)
        _run(["git", "worktree", "add", "--detach", str(tree), sha], cwd=ROOT)
    lock = ROOT / "requirements.lock"
    stamp = venv / ".bench-installed"
    want = f"{lock.read_text()}\n{BASELINE_EXTRA}"
    if not stamp.exists() or stamp.read_text() != want:
        uv = ROOT / ".venv" / "bin" / "uv"
        base = _run([sys.executable, "-c", "import sys; print(sys.base_prefix)"]).strip()
        py = Path(base) / "bin" / f"python{sys.version_info.major}.{sys.version_info.minor}"
        _run([str(uv), "venv", "-q", "--allow-existing", "--python", str(py), str(venv)])
        wheels = ["--find-links", "/opt/wheels"] if Path("/opt/wheels").is_dir() else []
        _run(
            [str(uv), "pip", "install", "-q", "--python", str(venv / "bin" / "python")]
            + ["-r", str(lock), *BASELINE_EXTRA, *wheels]
        )
        stamp.write_text(want)
    return Version(f"baseline {sha}", venv / "bin" / "python", tree)


class StampedServer:
    """The scripted LLM server, noting when each chat request arrived (monotonic seconds)."""

    def __init__(self) -> None:
        self.server = FakeLLMServer(n_ctx=131072).start()  # as llm.context_tokens: never trimmed
        self.stamps: list[float] = []
        self.server.default = self._answer

    def _answer(self, body: dict[str, Any]) -> Reply:
        last = (body.get("messages") or [{}])[-1]
        content = last.get("content")
        if last.get("role") == "user" and str(content).startswith(TURN_MARK):  # not the librarian
            self.stamps.append(time.monotonic())
        return Reply(content="ok")

    def reset(self) -> None:
        self.server.reset()
        self.server.default = self._answer
        self.stamps = []

    def close(self) -> None:
        self.server.stop()


def luna_env(version: Version, data: Path, endpoint: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LUNA_", "LLM_", "PYTHON"))}
    env.pop("DISCORD_TOKEN", None)
    env.update(
        PATH=f"{version.python.parent}{os.pathsep}{env.get('PATH', '')}",
        HF_HUB_OFFLINE="1",
        TRANSFORMERS_OFFLINE="1",
        LLM_ENDPOINT=endpoint,
        LLM_MODEL="fake-model",
        MEMORY_DB_PATH=str(data / "luna.db"),
        LOG_DIR=str(data / "logs"),
        LUNA_WORKSPACE=str(data / "workspace"),
    )
    if version.mcp_servers is not None:
        env["LUNA_MCP_SERVERS"] = str(version.mcp_servers)
    return env


# ---- the process tree -------------------------------------------------------------------


def _children(pid: int) -> list[int]:
    try:
        tasks = Path(f"/proc/{pid}/task").iterdir()
        kids = [int(k) for t in tasks for k in (t / "children").read_text().split()]
    except OSError:
        return []
    return kids


def process_tree(pid: int) -> list[int]:
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        todo += _children(p)
    return out


def label(pid: int, root: int) -> str:
    if pid == root:
        return "main"
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return "gone"
    for needle, name in (
        ("resource_tracker", "resource tracker"),
        ("spawn_main", "embedding worker"),
        ("onnx_export", "model export"),
        ("mcp_server_time", "MCP time server"),
        ("bwrap", "bwrap"),
    ):
        if needle in cmd:
            return name
    return cmd[:40]


def _status_kb(pid: int, field: str) -> int:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        pass
    return 0


def rss_by_process(root: int) -> dict[str, dict[str, float]]:
    """{label: {"rss_mb", "peak_mb"}} for every process of the tree under ``root``."""
    out: dict[str, dict[str, float]] = {}
    for pid in process_tree(root):
        name = label(pid, root)
        while name in out:
            name += "'"
        out[name] = {
            "rss_mb": round(_status_kb(pid, "VmRSS") / 1024, 1),
            "peak_mb": round(_status_kb(pid, "VmHWM") / 1024, 1),
        }
    return out


def _cpu_s(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])
    return total / CLK_TCK


def wait_idle(root: int) -> float:
    """Wait until the tree is idle; returns the seconds waited."""
    start = time.monotonic()
    prev = _cpu_s(process_tree(root))
    while time.monotonic() - start < IDLE_TIMEOUT:
        time.sleep(IDLE_WINDOW_S)
        now = _cpu_s(process_tree(root))
        if now - prev < IDLE_CPU_S:
            break
        prev = now
    return time.monotonic() - start


# ---- one run ------------------------------------------------------------------------------


def time_to_prompt(version: Version, data: Path, endpoint: str) -> float:
    """Seconds from starting Luna on a terminal until it shows the ``you>`` prompt."""
    master, slave = pty.openpty()
    errors = tempfile.TemporaryFile("w+")
    start = time.monotonic()
    proc = subprocess.Popen(
        [str(version.python), "-m", "luna"],
        cwd=version.tree,
        env=luna_env(version, data, endpoint),
        stdin=slave,
        stdout=slave,
        stderr=errors,
    )
    os.close(slave)
    seen = b""
    try:
        while b"you> " not in seen:
            if time.monotonic() - start > START_TIMEOUT:
                raise RuntimeError(f"{version.name}: no prompt within {START_TIMEOUT:.0f} s")
            ready, _, _ = select.select([master], [], [], 0.5)
            if ready:
                try:
                    seen += os.read(master, 4096)
                except OSError as exc:
                    errors.seek(0)
                    raise RuntimeError(
                        f"{version.name} exited before its prompt: {seen[-500:]!r} "
                        f"{errors.read()[-2000:]}"
                    ) from exc
        elapsed = time.monotonic() - start
        os.write(master, b"\x04")  # Ctrl-D: end of input, the REPL exits
        proc.wait(timeout=120)
        return elapsed
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
        errors.close()


def piped_run(version: Version, data: Path, server: StampedServer, turns: int) -> dict[str, Any]:
    """One message piped in, RSS once idle, then ``turns`` + 1 messages back to back."""
    server.reset()
    before = recall_modes(data / "logs")
    session = f"bench-{os.urandom(4).hex()}"  # a new conversation each run, in the same folder
    start = time.monotonic()
    proc = subprocess.Popen(
        [str(version.python), "-m", "luna", "--session", session],
        cwd=version.tree,
        env=luna_env(version, data, server.server.url),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert proc.stdin is not None and proc.stdout is not None
    replies = threading.Semaphore(0)
    out: list[str] = []
    failed: list[str] = []

    def read_stdout() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            out.append(line)
            if line.startswith("error:"):  # a turn failed: the run says so instead of hanging
                failed.append(line.strip())
                replies.release()
            if line.strip() == "ok":
                replies.release()

    reader = threading.Thread(target=read_stdout, daemon=True)
    reader.start()
    try:
        proc.stdin.write(f"{TURN_MARK} hello Luna, what is on my list for today?\n")
        proc.stdin.flush()
        if not replies.acquire(timeout=START_TIMEOUT) or failed:
            raise RuntimeError(f"{version.name}: no first reply: {failed or 'timeout'}")
        first_request = server.stamps[0] - start
        first_reply = time.monotonic() - start
        idle_wait = wait_idle(proc.pid)
        rss = rss_by_process(proc.pid)
        lines = [f"{TURN_MARK} {i}: the tulips need water on day {i}\n" for i in range(turns + 1)]
        proc.stdin.write("".join(lines))
        proc.stdin.close()
        proc.wait(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    reader.join(timeout=10)
    stamps = server.stamps[1:]
    if failed:
        raise RuntimeError(f"{version.name}: a turn failed: {failed[0]}")
    if len(stamps) != turns + 1:
        raise RuntimeError(f"{version.name}: {len(stamps)} requests, wanted {turns + 1}")
    gaps = [(b - a) * 1000 for a, b in zip(stamps, stamps[1:], strict=False)]
    return {
        "first_request_s": round(first_request, 3),
        "first_reply_s": round(first_reply, 3),
        "idle_after_s": round(idle_wait, 1),
        "gap_p50_ms": round(statistics.median(gaps), 2),
        "gap_p95_ms": round(percentile(gaps, 0.95), 2),
        "rss": rss,
        "recall_modes": {
            mode: n - before.get(mode, 0)
            for mode, n in recall_modes(data / "logs").items()
            if n > before.get(mode, 0)
        },
    }


def recall_modes(log_dir: Path) -> dict[str, int]:
    """How many recalls each mode served, from Luna's event log (all runs in this folder)."""
    counts: dict[str, int] = {}
    for path in sorted(log_dir.glob("luna-*.jsonl")):
        for line in path.read_text().splitlines():
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue
            if event.get("event") == "memory_op" and event.get("op") == "recall":
                mode = str(event.get("mode", "unreported"))
                counts[mode] = counts.get(mode, 0) + 1
    return counts


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def one_run(version: Version, data: Path, server: StampedServer, turns: int) -> dict[str, Any]:
    prompt = time_to_prompt(version, data, server.server.url)
    result = piped_run(version, data, server, turns)
    return {"prompt_s": round(prompt, 3), **result}


# ---- summary ------------------------------------------------------------------------------


def flat(run: dict[str, Any]) -> dict[str, float]:
    """The figures of one run, with RSS per process role."""
    rss = run["rss"]
    worker = rss.get("embedding worker", {"rss_mb": 0.0, "peak_mb": 0.0})
    tree = sum(p["rss_mb"] for p in rss.values())
    return {
        "first_request_s": run["first_request_s"],
        "prompt_s": run["prompt_s"],
        "gap_p50_ms": run["gap_p50_ms"],
        "gap_p95_ms": run["gap_p95_ms"],
        "main_rss_mb": rss["main"]["rss_mb"],
        "worker_rss_mb": worker["rss_mb"],
        "worker_peak_mb": worker["peak_mb"],
        "tree_rss_mb": round(tree, 1),
    }


def medians(runs: list[dict[str, Any]]) -> dict[str, float]:
    rows = [flat(r) for r in runs]
    return {k: round(statistics.median(r[k] for r in rows), 3) for k in rows[0]}


LABELS = {
    "first_request_s": "start → first model request (s)",
    "prompt_s": "start → REPL prompt (s)",
    "gap_p50_ms": "turn gap p50 (ms)",
    "gap_p95_ms": "turn gap p95 (ms)",
    "main_rss_mb": "main process RSS (MB)",
    "worker_rss_mb": "embedding worker RSS (MB)",
    "worker_peak_mb": "embedding worker peak RSS (MB)",
    "tree_rss_mb": "whole tree RSS (MB)",
}


def table(
    cur: dict[str, float],
    base: dict[str, float] | None,
    first: dict[str, float],
    no_mcp: dict[str, float],
    new_folder: dict[str, float],
) -> str:
    head = (
        f"{'':34}{'current':>10}{'baseline':>10}{'ratio':>8}{'goal':>8}{'1st start':>11}"
        f"{'no MCP':>9}{'new folder':>12}"
    )
    lines = [head, "-" * len(head)]
    for key, name in LABELS.items():
        b = base[key] if base else None
        ratio = f"{cur[key] / b:.2f}" if b else "—"
        goal = f"≤{GOALS[key]:g}" if key in GOALS else ""
        b_txt = f"{b:g}" if b is not None else "—"
        lines.append(
            f"{name:34}{cur[key]:>10g}{b_txt:>10}{ratio:>8}{goal:>8}{first.get(key, 0):>11g}"
            f"{no_mcp[key]:>9g}{new_folder[key]:>12g}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5, help="runs per version (the first is cold)")
    parser.add_argument("--turns", type=int, default=24, help="turn gaps measured per run")
    parser.add_argument("--baseline", default=DEFAULT_BASELINE, help="commit to compare with")
    parser.add_argument("--no-baseline", action="store_true", help="measure the current code only")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help="worktree + venv cache")
    parser.add_argument("--quick", action="store_true", help="3 runs of 8 turns")
    args = parser.parse_args(argv)
    if args.quick:
        args.runs, args.turns = 3, 8
    args.runs = max(2, args.runs)
    server = StampedServer()
    try:
        with tempfile.TemporaryDirectory(prefix="luna-cold-") as tmp:
            no_servers = Path(tmp) / "no_mcp_servers.json"
            no_servers.write_text('{"servers": {}}')
            versions = [
                Version("current", Path(sys.executable), ROOT),
                Version("current, no MCP", Path(sys.executable), ROOT, no_servers),
                Version("current, new folder", Path(sys.executable), ROOT, new_folder=True),
            ]
            if not args.no_baseline:
                versions.insert(0, ensure_baseline(args.baseline, args.cache))
            results: dict[str, list[dict[str, Any]]] = {v.name: [] for v in versions}
            for i in range(args.runs):
                for v in versions:
                    data = Path(tmp) / v.name.replace(" ", "-").replace(",", "")
                    data = data / f"run-{i + 1}" if v.new_folder else data
                    run = one_run(v, data, server, args.turns)
                    results[v.name].append(run)
                    f = flat(run)
                    print(
                        f"run {i + 1} {v.name:18} first request {f['first_request_s']:.2f} s, "
                        f"prompt {f['prompt_s']:.2f} s, gap p50 {f['gap_p50_ms']:.1f} ms, "
                        f"main {f['main_rss_mb']:.0f} MB, worker {f['worker_rss_mb']:.0f} MB, "
                        f"recall modes {run['recall_modes']}",
                        flush=True,
                    )
    finally:
        server.close()
    cur_runs = results["current"]
    cur = medians(cur_runs[1:])
    base_runs = results[versions[0].name] if not args.no_baseline else None
    base = medians(base_runs[1:]) if base_runs else None
    first = flat(cur_runs[0])
    no_mcp = medians(results["current, no MCP"][1:])
    new_folder = medians(results["current, new folder"])
    mcp_cost = round(cur["first_request_s"] - no_mcp["first_request_s"], 3)
    print()
    print(table(cur, base, first, no_mcp, new_folder))
    print(f"the shipped MCP time server adds {mcp_cost:+.2f} s to the first model request")
    print("processes after the first turn (current, last run):")
    for name, p in cur_runs[-1]["rss"].items():
        print(f"  {name:24}{p['rss_mb']:>8.1f} MB (peak {p['peak_mb']:.1f})")
    summary: dict[str, Any] = {"benchmark": "cold_start", **cur, "quick": args.quick}
    if base:
        summary["baseline_rev"] = versions[0].name.split()[-1]
        summary["baseline"] = base
        summary["ratio"] = {k: round(cur[k] / base[k], 3) for k in cur if base.get(k)}
    summary["first_start"] = first
    summary["no_mcp"] = no_mcp
    summary["new_folder"] = new_folder
    summary["mcp_first_request_cost_s"] = mcp_cost
    summary["goals_met"] = {k: cur[k] <= g for k, g in GOALS.items()}
    summary["runs"] = {name: runs for name, runs in results.items()}
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
