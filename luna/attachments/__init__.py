"""Files that come with a message: taken in, sniffed, stored by content hash, made readable.

``intake`` is the one door every front-end uses; ``store`` keeps the bytes, ``images`` makes
images safe and stable for a model (and is the agent's image source through ``ImageCache``),
``documents`` turns documents into text (in the ``convert`` child process, ``office`` for
Office files), ``sniff`` says what the bytes are.

May import: ``tools`` (the large-output pipeline, ``tools/output.py``), ``config``,
``observe``, ``messages``, ``errors``; never the agent, memory or a front-end
(``tests/test_layers.py``).
"""
