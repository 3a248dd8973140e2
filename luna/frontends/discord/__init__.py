"""The Discord adapter on the channel layer (``luna.frontends.channels``).

``bot.LunaBot`` is the discord.py client (events in); ``adapter.DiscordAdapter`` the layer's
calls out; ``routing`` Discord's places (guilds, channels, threads) and sessions; ``delivery``
where a scheduled result goes; ``calls`` the one translation of discord.py's errors.
"""
