"""The Discord front-end: routing, the message pipeline, streamed replies, splitting, approvals.

``bot.LunaBot`` is the discord.py client; the other modules are pure or small helpers it uses.
"""
