"""``luna doctor``'s skills check: how many skills load, from where, and what is left out.

Invariants: the same scan the running Luna does (``luna.skills.library``), so the counts are
what a new session would list; each skill left out is one ⚠ line with its fix (a bad skill
never stops Luna, it is only left out). Skill text is neutralized when printed (the doctor's
output is a terminal's).
"""

from __future__ import annotations

from collections import Counter

from luna.config import Config
from luna.doctor.result import CheckResult, fail, in_thread, ok, skipped
from luna.messages import neutralize


async def check_skills(cfg: Config) -> list[CheckResult]:
    if not cfg.skills.enabled:
        return [skipped("skills", "skills.enabled = false")]
    from luna.skills.library import SkillLibrary

    catalog = await in_thread(SkillLibrary(cfg).scan)
    by_source = Counter(s.source for s in catalog.skills.values())
    parts = ", ".join(f"{n} {source}" for source, n in sorted(by_source.items()))
    disabled = f", {len(catalog.disabled)} disabled" if catalog.disabled else ""
    summary = f"{len(catalog.skills)} enabled ({parts or 'none'}){disabled}"
    results = [ok("skills", f"{summary}, {len(catalog.left_out)} left out")]
    for problem in catalog.left_out:
        name = neutralize(f"skill {problem.name or problem.file.parent.name}")
        detail = neutralize(f"left out: {problem.file}: {problem.what}")
        results.append(fail(name, detail, neutralize(problem.fix), essential=False))
    return results
