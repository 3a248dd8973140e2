"""``luna doctor``'s webhook checks: each ``[hooks.NAME]`` by the rules the web's start applies
(``luna.hooks.rules``: its secret, its delivery target, its template), and whether anything
serves the hooks at all.

Invariants: no network and no database; a secret is named by its variable, never shown.
"""

from __future__ import annotations

from luna.config import Config
from luna.config.hooks import secret_var, session_of
from luna.doctor.result import CheckResult, fail, ok, skipped
from luna.hooks.rules import hook_problems, scheduler_problem
from luna.hooks.target import hook_target
from luna.scheduler.model import Target


def _where(target: Target) -> str:
    address = ", ".join(f"{k} {v}" for k, v in sorted(target.address.items()))
    return f"{target.frontend} ({address})" if address else target.frontend


async def check_hooks(cfg: Config) -> list[CheckResult]:
    if not cfg.hooks:
        return [skipped("webhooks", "none configured: [hooks.NAME] in config.toml")]
    results = []
    if not cfg.web.enabled:
        results.append(
            fail(
                "webhooks",
                f"{len(cfg.hooks)} configured, but only the web front-end serves them",
                "set web.enabled = true, or run `luna web`",
                essential=False,
            )
        )
    off = scheduler_problem(cfg)
    if off is not None:
        results.append(fail("webhooks", off.text, off.fix))
    for name, hook in cfg.hooks.items():
        label = f"hook {name}"
        problems = hook_problems(cfg, name, hook)
        for p in problems:
            results.append(fail(label, p.text, p.fix, essential=p.essential))
        target, _ = hook_target(cfg, name, hook)
        if not problems and target is not None:
            results.append(
                ok(
                    label,
                    f"POST /hooks/{name}: secret from {secret_var(name, hook)}, session "
                    f"{session_of(name, hook)}, results to {_where(target)}, "
                    f"{hook.per_minute}/min",
                )
            )
    return results
