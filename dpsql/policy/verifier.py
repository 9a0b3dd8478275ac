"""An analyst's credential: a SCRAM-SHA-256 verifier in PostgreSQL's ``pg_authid`` format.

``SCRAM-SHA-256$<iterations>:<salt>$<StoredKey>:<ServerKey>`` with base64 fields. Parsed when
the policy loads (dpsql.policy.model), so a malformed one is a policy error, not a login that
fails inside the server; the wire's SCRAM exchange (dpsql.wire.auth) uses the parsed form.

>>> parse_verifier("SCRAM-SHA-256$4096:c2FsdA==$" + "A" * 43 + "=:" + "B" * 43 + "=").iterations
4096
>>> parse_verifier("SCRAM-SHA-256$4096:...")
Traceback (most recent call last):
ValueError: not a SCRAM-SHA-256 verifier
"""

from __future__ import annotations

import base64
import binascii
from dataclasses import dataclass

SCHEME = "SCRAM-SHA-256"
KEY_BYTES = 32  # SHA-256


@dataclass(frozen=True)
class Verifier:
    iterations: int
    salt: bytes
    stored_key: bytes
    server_key: bytes


def parse_verifier(text: str) -> Verifier:
    """Parse a verifier string.

    Raises:
        ValueError: not a SCRAM-SHA-256 verifier (wrong shape, base64, iteration count or key
        length).
    """
    try:
        scheme, iter_salt, keys = text.split("$")
        it, salt = iter_salt.split(":")
        stored, server = keys.split(":")
        b64d = base64.b64decode
        v = Verifier(
            int(it),
            b64d(salt, validate=True),
            b64d(stored, validate=True),
            b64d(server, validate=True),
        )
    except (ValueError, binascii.Error):
        raise ValueError("not a SCRAM-SHA-256 verifier") from None
    if (
        scheme != SCHEME
        or v.iterations < 1
        or not v.salt
        or len(v.stored_key) != KEY_BYTES
        or len(v.server_key) != KEY_BYTES
    ):
        raise ValueError("not a SCRAM-SHA-256 verifier")
    return v
