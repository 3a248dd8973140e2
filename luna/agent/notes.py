"""What the agent says in its own words (not the model's), and the clock it reads.

Invariant: every line here is short, says what happened and what the user can do next.
"""

from __future__ import annotations

import datetime as dt

from luna.config.timezone import zone_for

EMPTY_REPLY = "(The model sent back an empty reply. Send your message again, or rephrase it.)"


def round_limit_note(max_rounds: int, wanted: list[str]) -> str:
    more = f" It still wanted to run: {', '.join(dict.fromkeys(wanted))}." if wanted else ""
    return (
        f"(I used all {max_rounds} tool rounds for this message before finishing.{more} "
        "Ask me to continue and I will pick up from here.)"
    )


def now_in(timezone: str) -> dt.datetime:
    """The time in ``agent.timezone``: the zone people give times in (the scheduler's)."""
    return dt.datetime.now(zone_for(timezone))
