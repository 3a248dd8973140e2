"""The document converter's child process: bytes on stdin, a DocumentText as JSON on stdout.

Run as ``python -m luna.attachments.convert MIME MAX_PAGES MAX_CHARS`` by
``luna.attachments.documents.convert``, which kills it past its time limit.

Invariant: the process caps its own address space at ``MEMORY_LIMIT`` before it reads a byte,
so a PDF built to exhaust memory ends this process (MemoryError or the kernel), not Luna.
"""

from __future__ import annotations

import resource
import sys

from luna.attachments.documents import extract, to_json

MEMORY_LIMIT = 2 * 1024**3


def main() -> int:
    mime, max_pages, max_chars = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    resource.setrlimit(resource.RLIMIT_AS, (MEMORY_LIMIT, MEMORY_LIMIT))
    data = sys.stdin.buffer.read()
    sys.stdout.write(to_json(extract(data, mime, max_pages, max_chars)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
