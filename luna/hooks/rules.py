"""What makes a webhook usable: the one list ``luna doctor`` shows and the web front-end's
start refuses on (its essential problems).

Invariants:
- No network and no database: only the configuration and the environment it read.
- Secrets are named by their variable, never shown.
- Essential: a secret missing or too weak, a delivery target nothing could show, the
  scheduler off (its delivery router shows hook results). Not essential: a template that,
  with a body at ``max_body_bytes``, would take more than half the model's context.
"""

from __future__ import annotations

import datetime as dt
import json
from dataclasses import dataclass

from luna.config import Config
from luna.config.hooks import HookConfig, secret_var
from luna.config.secrets import HOW_TO_MAKE_HOOK_SECRET, hook_secret_problem
from luna.hooks.prompt import render
from luna.hooks.target import hook_target

SAMPLE_EVENT = json.dumps({"event": "luna doctor sample", "ok": True})
CHARS_PER_TOKEN = 3  # a rough, cautious ratio for JSON (many short tokens)


@dataclass(frozen=True)
class Problem:
    text: str
    fix: str
    essential: bool = True


def scheduler_problem(cfg: Config) -> Problem | None:
    if cfg.hooks and not cfg.scheduler.enabled:
        return Problem(
            "hooks deliver their results through the scheduler, which is off",
            "set scheduler.enabled = true (or remove the [hooks.*] tables)",
        )
    return None


def hook_problems(cfg: Config, name: str, hook: HookConfig) -> list[Problem]:
    """Everything that keeps hook ``name`` from working, essential problems first."""
    out: list[Problem] = []
    var = secret_var(name, hook)
    secret = hook_secret_problem(hook.secret, var)
    if secret:
        out.append(Problem(secret, f"{HOW_TO_MAKE_HOOK_SECRET} and set {var} (never in the file)"))
    _, target = hook_target(cfg, name, hook)
    if target:
        out.append(Problem(f"deliver_to: {target}", f"fix hooks.{name}.deliver_to"))
    sample = render(name, hook, SAMPLE_EVENT, dt.datetime.now(dt.UTC))
    worst = (len(sample) + hook.max_body_bytes) // CHARS_PER_TOKEN
    if worst > cfg.llm.context_tokens // 2:
        out.append(
            Problem(
                f"the prompt with a body of {hook.max_body_bytes:,} bytes may take ~{worst:,} "
                f"tokens, more than half of llm.context_tokens ({cfg.llm.context_tokens:,})",
                f"lower hooks.{name}.max_body_bytes",
                essential=False,
            )
        )
    return out
