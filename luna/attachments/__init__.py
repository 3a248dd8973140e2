"""Files that come with a message: taken in, sniffed, stored by content hash, made readable.

``intake`` is the one door every front-end uses; ``store`` keeps the bytes, ``images`` makes
images safe and stable for a model, ``documents`` turns documents into text, ``sniff`` says
what the bytes are.
"""
