"""Webhooks: events other programs sign and send, each run as one of the owner's turns.

A Home Assistant automation or a cron job on another machine sends ``POST /hooks/NAME`` to
Luna's web server (``luna.frontends.web.hooks_api`` is the door). Here, below the front-ends:
``signing`` (the signature scheme, for Luna and its callers), ``store`` (the ``hook_events``
table: an event is committed before it is acknowledged and runs at most once), ``prompt``
(the hook's template around the event, as untrusted data), ``target`` (where results go: a
scheduler delivery target), ``worker`` (the turns, in tracked tasks, results delivered through
the scheduler's router), ``rules`` (what ``luna doctor`` and the web's start check) and
``cli`` (``luna hooks list|sign|test``). Settings: ``luna.config.hooks``.
"""
