"""The Telegram adapter on the channel layer (``luna.frontends.channels``), on
python-telegram-bot 22's bare ``telegram.Bot`` (no ``Application``: Luna owns the loop, the
offset and the dispatch).

``frontend`` the front-end contract and the bot's lifecycle; ``polling`` / ``webhook`` where
updates come from; ``offsets`` which updates are settled and the offset saved with each turn;
``updates`` a message as an ``InboundEvent``; ``adapter`` the layer's calls as Bot API calls;
``render`` Markdown as Telegram HTML; ``calls`` the one translation of the library's errors;
``conversation`` chats, topics and session ids.
"""
