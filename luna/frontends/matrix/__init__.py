"""Luna on Matrix, end-to-end encrypted rooms included (mautrix + python-olm), on the channel
layer (``luna.frontends.channels``).

Read in this order: ``frontend`` (start, stop, events to the layer), ``inbound`` (a room
message as the layer's event), ``adapter`` (the layer's calls as room events), ``connection``
(login, device keys), ``crosssign`` (the bot's own cross-signing keys, its device signed),
``sync`` (events in), ``settle`` (when the sync token may be saved, in the channel ledger),
``events`` (event JSON to facts), ``outbox`` (events out, rate limits as the layer's errors),
``render`` (Markdown to Matrix HTML), ``media`` (files, decrypted), ``conversation`` (rooms,
sessions, addresses).
"""
