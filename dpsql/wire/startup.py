"""The startup phase: SSL/GSS negotiation, protocol version check, cancel requests.

PostgreSQL's order: the client may send SSLRequest (answered 'S' then a TLS handshake, or 'N') or
GSSENCRequest (always 'N' here), then a StartupMessage, or instead a CancelRequest on a fresh
connection. With ``require_tls`` a StartupMessage over plaintext is refused (28000).
"""

from __future__ import annotations

import ssl
from dataclasses import dataclass

from dpsql.errors import FeatureNotSupported, InvalidAuthorization, ProtocolViolation
from dpsql.wire import messages as m
from dpsql.wire.conn import Channel

STARTUP_TIMEOUT_S = 60.0


@dataclass(frozen=True)
class Startup:
    """A completed startup: who connects to which database, with which parameters."""

    user: str
    database: str
    parameters: dict[str, str]


async def negotiate(
    ch: Channel, tls: ssl.SSLContext | None, require_tls: bool
) -> Startup | m.CancelRequest:
    """Run the startup phase up to (not including) authentication.

    Raises:
        ProtocolViolation: a malformed packet, an unsupported protocol, data sent out of order.
        InvalidAuthorization: plaintext when TLS is required; no user name.
    """
    ssl_tried = gss_tried = False
    while True:
        frame = await ch.recv(STARTUP_TIMEOUT_S)
        packet = m.decode_startup(frame.body)
        if isinstance(packet, m.SSLRequest):
            if ssl_tried or ch.tls:
                raise ProtocolViolation("duplicate SSLRequest")
            ssl_tried = True
            if tls is None:
                ch.send_raw(m.backend.SSL_REFUSE)
            else:
                ch.send_raw(m.backend.SSL_ACCEPT)
                await ch.start_tls(tls)
            continue
        if isinstance(packet, m.GSSENCRequest):
            if gss_tried:
                raise ProtocolViolation("duplicate GSSENCRequest")
            gss_tried = True
            ch.send_raw(m.backend.SSL_REFUSE)
            continue
        if isinstance(packet, m.CancelRequest):
            return packet
        ch.decoder.startup = False
        return _check_startup(ch, packet, require_tls)


def _check_startup(ch: Channel, packet: m.StartupMessage, require_tls: bool) -> Startup:
    major, minor = packet.protocol >> 16, packet.protocol & 0xFFFF
    if major != 3:
        raise FeatureNotSupported(
            f"unsupported frontend protocol {major}.{minor}: server supports 3.0",
            hint="use a PostgreSQL client speaking protocol 3",
        )
    params = dict(packet.parameters)
    unsupported = tuple(k for k in params if k.startswith("_pq_."))
    if minor > 0 or unsupported:
        # Tell the client we speak 3.0 and which protocol options we ignore.
        ch.send(m.NegotiateProtocolVersion(0, unsupported).encode())
        for k in unsupported:
            params.pop(k)
    if require_tls and not ch.tls:
        raise InvalidAuthorization(
            "dpsql requires an encrypted connection",
            hint="connect with sslmode=require (or stricter)",
        )
    user = params.get("user", "")
    if not user:
        raise InvalidAuthorization(
            "no PostgreSQL user name specified in startup packet",
            hint="pass a user name (the analyst) when connecting",
        )
    database = params.get("database") or user
    return Startup(user, database, params)
