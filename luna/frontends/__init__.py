"""Front-ends: where messages come from and replies go (terminal REPL, Discord).

Each front-end builds ``InboundMessage`` s, runs them through ``Agent.run_turn`` and renders the
events. Front-ends may import anything below them; nothing below imports a front-end.
"""
