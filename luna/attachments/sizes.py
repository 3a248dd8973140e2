"""A file's size as people read it ("812 bytes", "14 KB", "3.2 MB"): one rule for every line
that names an attachment, in the intake's refusals, the model's image lines and the doctor."""

from __future__ import annotations


def size_text(n: int) -> str:
    if n < 1024:
        return f"{n} bytes"
    if n < 1024 * 1024:
        return f"{n / 1024:.0f} KB"
    return f"{n / (1024 * 1024):.1f} MB"
