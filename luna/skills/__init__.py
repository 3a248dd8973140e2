"""Skills: folders in the open Agent Skills format that teach Luna a job without code.

``folder`` reads and checks one skill (the format by the ``skills-ref`` oracle, plus Luna's
limits); ``library`` finds every skill (installed, ``skills.paths``, learned, bundled), picks
the winner of a name and knows which are enabled; ``store`` installs, removes, enables and
disables; ``learned`` keeps the model's own skills with every version; ``cli`` is
``luna skills``. The tools (``load_skill``, ``save_skill``) are in ``luna.tools.builtin.skills``
and the index in a session's head in ``luna.agent.head``.

May import: ``config``, ``errors``, ``observe``; nothing above them.
"""
