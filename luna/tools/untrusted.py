"""The untrusted wrapper: the one way text from outside reaches the model as data.

Tool results (via the registry), a paper's abstract sent for summarizing and a large output sent
for extraction are all wrapped here, so the defusing rule has one owner.

Invariants:
- The result has exactly one opening ``<untrusted source="...">`` tag (at the start) and one
  closing ``</untrusted>`` tag (at the end): any ``<untrusted`` or ``</untrusted`` inside the
  text (any case, spaces allowed after ``<``) has its ``<`` escaped as ``&lt;``.
- ``source`` is reduced to ``[A-Za-z0-9_.:-]`` so it cannot break out of the attribute.
"""

from __future__ import annotations

import re

_TAG = re.compile(r"</?\s*untrusted", re.IGNORECASE)
_SOURCE_CHARS = re.compile(r"[^A-Za-z0-9_.:-]")


def wrap_untrusted(text: str, source: str) -> str:
    """Mark ``text`` as data from ``source``; tags inside the text are defused."""
    safe_source = _SOURCE_CHARS.sub("_", source)
    body = _TAG.sub(lambda m: m.group(0).replace("<", "&lt;"), text)
    return f'<untrusted source="{safe_source}">\n{body}\n</untrusted>'
