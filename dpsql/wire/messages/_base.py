"""Shapes several messages share, in both directions: no body, an opaque body, one String.

A message class names its type byte in ``code``; a subclass of :class:`Empty` or :class:`Opaque`
only adds its own ``code`` (``class Sync(Empty)``), and a message whose body is one String decodes
it with :func:`one_string`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Self

from dpsql.wire.messages._buffer import Reader, frame


@dataclass(frozen=True, slots=True)
class Empty:
    """A message that is its type byte and length only (Sync, ParseComplete, ...)."""

    code: ClassVar[bytes] = b"?"

    def encode(self) -> bytes:
        return frame(self.code, b"")

    @classmethod
    def decode(cls, body: bytes) -> Self:
        Reader(body).end()
        return cls()


@dataclass(frozen=True, slots=True)
class Opaque:
    """A message whose body dpsql keeps as bytes (CopyData, a SASL response, ...)."""

    code: ClassVar[bytes] = b"?"
    data: bytes

    def encode(self) -> bytes:
        return frame(self.code, self.data)

    @classmethod
    def decode(cls, body: bytes) -> Self:
        return cls(bytes(body))


def one_string(body: bytes) -> str:
    """The String that is a message's whole body (Query, CommandComplete, ...)."""
    r = Reader(body)
    s = r.cstring()
    r.end()
    return s
