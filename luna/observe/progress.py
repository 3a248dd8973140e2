"""Progress bars a person watches: the one rule for when a command draws one.

A bar is drawn only on a terminal (never into a pipe or a log file: a script reading stderr
gets the command's lines, not carriage returns) and only for work that lasts: a bar appears
after ``DELAY_S``, so a sub-second import or reindex draws nothing.
"""

from __future__ import annotations

import sys
from typing import Any

DELAY_S = 1.0


def progress_bar(*, total: int, unit: str, desc: str, initial: int = 0) -> Any:
    """A tqdm bar on stderr under this module's rule (use as a context manager); ``initial``
    is the work done before (a resumed reindex)."""
    from tqdm import tqdm

    is_terminal = sys.stderr.isatty()
    return tqdm(
        total=total,
        initial=initial,
        unit=unit,
        desc=desc,
        file=sys.stderr,
        disable=not is_terminal,
        delay=DELAY_S,
    )
