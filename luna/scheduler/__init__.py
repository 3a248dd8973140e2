"""The scheduler: reminders, recurring prompts and the heartbeat, kept in the database.

Modules, in the order a task flows through them: ``model`` (the shapes), ``timing`` (when:
cron via cronsim, zoneinfo for DST), ``rights`` (who may), ``api`` (add/list/cancel/run-now:
the one code path for tools, CLI and web), ``store`` (SQL), ``runner`` (the tick: fire once,
missed periods, retries, interruptions), ``execute`` (one unattended agent turn),
``delivery`` (results to the front-end and session they were asked from), ``tool_port``
(what the model's tools call), ``service`` (the
lease and the loop app runs), ``clock`` (injectable time), ``cli`` (``luna schedule``).

May import ``agent``-level shapes, ``memory``, ``config``, ``messages``, ``errors`` and
``observe``; never a front-end (front-ends register delivery functions with the router).
"""
