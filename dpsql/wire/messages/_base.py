"""One declaration per message: its type byte, its fields, and the wire type of each field.

A message class is a frozen dataclass under :class:`Message` that names, as class arguments,
its type byte (``code``) and the :class:`Codec` of each of its fields in order (``layout``: the
body is the fields, one after the other); :class:`Message` makes it a dataclass and writes
``encode`` and ``decode`` once for all (e.g. ``class Execute(Message, code=b"E",
layout=(STRING, ROW_LIMIT))`` for its fields ``portal: str`` and ``max_rows: int``).

``head`` is an Int32 constant before the fields (an authentication request's subtype, a startup
packet's request code). A startup packet has no type byte: its ``code`` is empty.

>>> array(U32, "parameter").get(Reader(b"\\x00\\x02\\x00\\x00\\x00\\x17\\x00\\x00\\x00\\x19"))
(23, 25)
>>> nullable("bad length {}").put(None), nullable("bad length {}").put(b"ab")
(b'\\xff\\xff\\xff\\xff', b'\\x00\\x00\\x00\\x02ab')
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from itertools import repeat
from operator import call
from typing import Any, ClassVar, Generic, Self, TypeVar, dataclass_transform

from dpsql.errors import ProtocolViolation
from dpsql.wire.messages._buffer import INT16, INT32, UINT32, Reader, cstr, frame

T = TypeVar("T")

NULL = INT32.pack(-1)


@dataclass(frozen=True, slots=True)
class Codec(Generic[T]):
    """How one field stands on the wire: ``put`` writes its value, ``get`` reads it back."""

    put: Callable[[T], bytes]
    get: Callable[[Reader], T]


def _ascii(v: str) -> bytes:
    return v.encode("ascii")


def _char(r: Reader) -> str:
    return chr(r.byte())


def _same(v: bytes) -> bytes:
    return v


STRING: Codec[str] = Codec(cstr, Reader.cstring)
I16: Codec[int] = Codec(INT16.pack, Reader.int16)
I32: Codec[int] = Codec(INT32.pack, Reader.int32)
U32: Codec[int] = Codec(UINT32.pack, Reader.uint32)
CHAR: Codec[str] = Codec(_ascii, _char)  # one ASCII byte (a status letter)
REST: Codec[bytes] = Codec(_same, Reader.rest)  # the rest of the body, as it is


def nullable(error: str) -> Codec[bytes | None]:
    """Int32 length (-1: NULL), then that many bytes; a length below -1 is a
    :class:`ProtocolViolation` with the message ``error.format(length)``."""

    def put(v: bytes | None) -> bytes:
        return NULL if v is None else INT32.pack(len(v)) + v

    def get(r: Reader) -> bytes | None:
        n = r.int32()
        if n < -1:
            raise ProtocolViolation(error.format(n))
        return None if n == -1 else r.raw(n)

    return Codec(put, get)


def array(item: Codec[T], what: str) -> Codec[tuple[T, ...]]:
    """Int16 count (a negative one is refused, naming ``what``), then that many items."""

    def put(v: tuple[T, ...]) -> bytes:
        return INT16.pack(len(v)) + b"".join([item.put(x) for x in v])

    def get(r: Reader) -> tuple[T, ...]:
        get_item = item.get
        return tuple([get_item(r) for _ in range(r.count16(what))])

    return Codec(put, get)


def _put_strings(v: tuple[str, ...]) -> bytes:
    return b"".join([cstr(s) for s in v]) + b"\x00"


def _get_strings(r: Reader) -> tuple[str, ...]:
    out = []
    while (s := r.cstring()) != "":
        out.append(s)
    return tuple(out)


STRINGS: Codec[tuple[str, ...]] = Codec(_put_strings, _get_strings)  # ended by an empty String


@dataclass_transform(frozen_default=True)
@dataclass(frozen=True, slots=True)
class Message:
    """A protocol message: ``encode()`` gives the whole message (type byte and length
    included), ``decode(body)`` reads the body after the length word, so
    ``decode(encode()[5:])`` round-trips; a malformed body is a :class:`ProtocolViolation`.

    A message class declares its type byte, ``head`` and layout as class arguments
    (``class Execute(Message, code=b"E", layout=(STRING, ROW_LIMIT))``) and its fields as
    annotations: it is made a frozen dataclass here, once for all."""

    code: ClassVar[bytes] = b"?"
    head: ClassVar[int | None] = None
    layout: ClassVar[tuple[Codec[Any], ...]] = ()
    # the layout, unpacked once per class (the message codecs run for every message)
    _head: ClassVar[bytes] = b""
    _puts: ClassVar[tuple[Callable[[Any], bytes], ...]] = ()
    _gets: ClassVar[tuple[Callable[[Reader], Any], ...]] = ()

    def __init_subclass__(
        cls,
        code: bytes | None = None,
        head: int | None = None,
        layout: tuple[Codec[Any], ...] | None = None,
        **kwargs: Any,
    ) -> None:
        super(Message, cls).__init_subclass__(**kwargs)  # (slots=True replaced Message)
        if code is not None:
            cls.code = code
        if head is not None:
            cls.head = head
        if layout is not None:
            cls.layout = layout
        dataclass(frozen=True)(cls)
        cls._head = b"" if cls.head is None else UINT32.pack(cls.head)
        cls._puts = tuple(c.put for c in cls.layout)
        cls._gets = tuple(c.get for c in cls.layout)

    def encode(self) -> bytes:
        values = map(getattr, repeat(self), self.__match_args__)
        return frame(self.code, self._head + b"".join(map(call, self._puts, values)))

    @classmethod
    def decode(cls, body: bytes) -> Self:
        r = Reader(body)
        if cls._head:
            r.uint32()
        values = tuple(map(call, cls._gets, repeat(r)))
        r.end()
        return cls(*values)


class Opaque(Message, layout=(REST,)):
    """A message whose body dpsql keeps as bytes (CopyData, a SASL response, ...)."""

    data: bytes


class KeyData(Message, layout=(I32, I32)):
    """A session's cancel key: the process id and secret key dpsql sends in BackendKeyData and a
    client sends back in a CancelRequest."""

    process_id: int
    secret_key: int
