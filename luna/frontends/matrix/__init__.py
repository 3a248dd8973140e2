"""Luna on Matrix, end-to-end encrypted rooms included (mautrix + python-olm).

Read in this order: ``frontend`` (start, stop, one turn), ``routing`` (who, where),
``connection`` (login, device keys), ``sync`` (events in, token saved after them), ``events``
(event JSON to facts), ``outbox`` and ``reply`` (events out, rate limits), ``render`` (Markdown
to Matrix HTML), ``media`` and ``intake`` (files), ``approval``, ``sync_token``.
"""
