"""Observability: the JSON-lines event log (``events``) and usage statistics (``stats``).

Imports only the standard library and ``luna.config``; every other package may log through it.
"""

from luna.observe.events import (
    TURN_DETAIL,
    EventLog,
    Timer,
    hide_turn_details,
    is_debug,
    log_event,
    new_turn_id,
    session_id_var,
    setup,
    shutdown,
    turn_context,
    turn_id_var,
)

__all__ = [
    "TURN_DETAIL",
    "EventLog",
    "Timer",
    "is_debug",
    "log_event",
    "new_turn_id",
    "session_id_var",
    "setup",
    "shutdown",
    "turn_context",
    "turn_id_var",
    "hide_turn_details",
]
