"""How a webhook event is signed: the one definition, for Luna and for the programs calling it.

The scheme (README "Webhooks" shows it with ``openssl``)::

    X-Luna-Timestamp: <Unix time in whole seconds, when the event was signed>
    X-Luna-Signature: sha256=<hex of HMAC-SHA256(key = the hook's secret as UTF-8,
                                                 message = "<timestamp>." + the body's bytes)>

Invariants:
- The signature covers the timestamp and every byte of the body as sent: another byte,
  another timestamp or another hook's secret gives another signature.
- Signatures are compared in constant time (``hmac.compare_digest``); hex in either case.
- A timestamp is fresh within ``window`` seconds of now, either way (clocks drift); a stale
  one is refused even when it is signed right, so a captured request cannot be replayed
  later. Inside the window, the store refuses a signature it has seen (``luna.hooks.store``).
- :func:`problem` says what is wrong in one line and never echoes the secret.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import time

TIMESTAMP_HEADER = "X-Luna-Timestamp"
SIGNATURE_HEADER = "X-Luna-Signature"
SCHEME = "sha256="
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"sha256=[0-9a-fA-F]{64}")


def signature(secret: str, timestamp: int | str, body: bytes) -> str:
    """The ``X-Luna-Signature`` value for ``body`` signed at ``timestamp``."""
    message = f"{timestamp}.".encode() + body
    return SCHEME + hmac.new(secret.encode(), message, hashlib.sha256).hexdigest()


def sign(secret: str, body: bytes, now: float | None = None) -> dict[str, str]:
    """Both headers for ``body``, signed now (or at ``now``)."""
    timestamp = int(time.time() if now is None else now)
    return {
        TIMESTAMP_HEADER: str(timestamp),
        SIGNATURE_HEADER: signature(secret, timestamp, body),
    }


def problem(
    secret: str,
    timestamp: str | None,
    sent: str | None,
    body: bytes,
    *,
    window: float,
    now: float | None = None,
) -> str | None:
    """Why the headers do not prove that the hook's secret signed ``body`` just now, or None."""
    if not timestamp or not sent:
        missing = [h for h, v in ((TIMESTAMP_HEADER, timestamp), (SIGNATURE_HEADER, sent)) if not v]
        return f"missing {' and '.join(missing)} (see README: Webhooks)"
    if not _TIMESTAMP.fullmatch(timestamp.strip()):
        return f"{TIMESTAMP_HEADER} must be the Unix time in whole seconds"
    if not _SIGNATURE.fullmatch(sent.strip()):
        return f"{SIGNATURE_HEADER} must be sha256= and 64 hex digits"
    expected = signature(secret, timestamp.strip(), body)
    if not hmac.compare_digest(sent.strip().lower().encode(), expected.encode()):
        return "wrong signature"
    age = (time.time() if now is None else now) - int(timestamp)
    if abs(age) > window:
        when = "old" if age > 0 else "in the future"
        return f"the timestamp is {abs(age):.0f} s {when}, outside the {window:.0f} s window"
    return None
