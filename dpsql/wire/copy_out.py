r"""``COPY ... TO STDOUT``: an answer in COPY's text or CSV format, over the COPY protocol.

psql's ``\copy (SELECT ...) TO 'file.csv' CSV HEADER`` sends ``COPY ( SELECT ... ) TO STDOUT CSV
HEADER``; psycopg's ``cursor.copy()``, asyncpg's ``copy_from_query`` / ``copy_from_table`` and
export tools send the same statement. dpsql answers its query as it answers the query itself
(:class:`CopyStatement.query`: a private aggregate is charged once, exactly as the SELECT, and a
repeat of either is free; ``COPY table TO STDOUT`` is ``SELECT * FROM table``, refused 42501 for a
private table as its rows would be), then writes the released rows as PostgreSQL's COPY writes
them (:func:`copy_lines`): CopyOutResponse, one CopyData per line, CopyDone, ``COPY n``.

Forms: ``COPY { table [(columns)] | (query) } TO STDOUT`` with the options of PostgreSQL 9+
(``WITH (FORMAT csv, HEADER, DELIMITER ';', NULL 'x', QUOTE '"', ESCAPE '\', FORCE_QUOTE (a) |
*, ENCODING 'UTF8')``) or of before (``CSV HEADER DELIMITER AS ';' FORCE QUOTE *``). Refused:
``COPY ... TO 'file'`` / ``TO PROGRAM`` (42501: the server's files), ``FORMAT binary`` (0A000);
``COPY ... FROM`` is left to the engine's refusal (25006, read-only). Pure: parsing and
formatting; :class:`dpsql.wire.protocol.Protocol` sends the messages.

>>> st = parse_copy("COPY (SELECT 1) TO STDOUT WITH (FORMAT csv, HEADER)")
>>> st.query, st.csv, st.header, st.delimiter, st.null
('SELECT 1', True, True, ',', '')
>>> parse_copy("copy regions (code, name) to stdout csv header").query
'SELECT "code", "name" FROM regions'
>>> parse_copy("COPY t FROM STDIN") is None
True
>>> copy_lines(CopyStatement("q", csv=True, delimiter=",", null="", header=True),
...            ["a", "b c"], [(b"x,y", None), (b"", b'say "hi" now')])
[b'a,b c\n', b'"x,y",\n', b'"","say ""hi"" now"\n']
>>> copy_lines(CopyStatement("q"), ["a"], [(b"tab\there\\",), (None,)])
[b'tab\\there\\\\\n', b'\\N\n']
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from dpsql.errors import InvalidParameter, PrivacyViolation, SqlSyntaxError, UnsupportedSql
from dpsql.sql.dollar_quotes import matching_paren
from dpsql.wire.sql_tokens import Tok, scan, skip_space

_I16 = struct.Struct("!h")
_I32 = struct.Struct("!i")
COPY_DONE = b"c" + _I32.pack(4)


@dataclass(frozen=True, slots=True)
class CopyStatement:
    """A ``COPY ... TO STDOUT``: the query whose rows it writes, and how."""

    query: str
    table: str | None = None  # COPY table TO: the table as written (for a refusal's words)
    csv: bool = False
    delimiter: str = "\t"
    null: str = "\\N"
    header: bool = False
    quote: str = '"'
    escape: str = '"'
    force_quote: tuple[str, ...] | None = ()  # None: FORCE_QUOTE *


def _tokens(text: str) -> list[Tok]:
    toks, stop = scan(text)
    if stop < len(text):
        raise SqlSyntaxError(f'syntax error at or near "{text[stop : stop + 10]}"')
    return toks


def parse_copy(text: str) -> CopyStatement | None:
    """``text`` as a ``COPY ... TO STDOUT``; None when it is not a COPY to the client (any
    other statement, or ``COPY ... FROM``: the engine refuses it in its own words).

    Raises:
        PrivacyViolation: 42501, ``COPY ... TO 'file'`` or ``TO PROGRAM``.
        UnsupportedSql: 0A000, ``FORMAT binary``.
        SqlSyntaxError / InvalidParameter: 42601 / 22023, options PostgreSQL refuses.
    """
    i = skip_space(text, 0)
    if text[i : i + 4].lower() != "copy" or (i + 4 < len(text) and text[i + 4].isalnum()):
        return None
    i = skip_space(text, i + 4)
    table: str | None = None
    if i < len(text) and text[i] == "(":
        end = matching_paren(text, i)
        if end < 0:
            return None  # the engine's syntax error
        query = text[i + 1 : end].strip()
        rest = _tokens(text[end + 1 :])
    else:
        toks = _tokens(text[i:])
        j = 0
        parts: list[str] = []
        while j < len(toks) and toks[j].kind in ("word", "qid"):
            t = toks[j]
            parts.append(t.text if t.kind == "word" else '"' + t.text.replace('"', '""') + '"')
            j += 1
            if j < len(toks) and toks[j].text == "." and toks[j].kind == "punct":
                j += 1
                continue
            break
        if not parts:
            return None
        table = ".".join(parts)
        columns = "*"
        if j < len(toks) and toks[j].text == "(":
            names: list[str] = []
            j += 1
            while j < len(toks) and toks[j].kind in ("word", "qid"):
                names.append('"' + toks[j].text.replace('"', '""') + '"')
                j += 1
                if j < len(toks) and toks[j].text == ",":
                    j += 1
            if j >= len(toks) or toks[j].text != ")" or not names:
                raise SqlSyntaxError("syntax error in COPY's column list",
                                     hint="COPY table (a, b) TO STDOUT")  # fmt: skip
            j += 1
            columns = ", ".join(names)
        query = f"SELECT {columns} FROM {table}"
        rest = toks[j:]
    if not rest or rest[0].text != "to" or rest[0].kind != "word":
        return None  # COPY ... FROM, or a syntax error: the engine's words
    if len(rest) < 2:
        raise SqlSyntaxError("syntax error at end of input", hint="COPY (SELECT ...) TO STDOUT")
    dest = rest[1]
    if dest.kind == "str" or dest.text in ("program", "stdin"):
        raise PrivacyViolation(
            "COPY to a file or program is not allowed: dpsql sends answers to the client only",
            hint="COPY ... TO STDOUT, saved by your client (psql: \\copy (SELECT ...) TO "
            "'file.csv' WITH (FORMAT csv, HEADER))",
        )
    if dest.text != "stdout":
        raise SqlSyntaxError(f'syntax error at or near "{dest.text}"',
                             hint="COPY (SELECT ...) TO STDOUT")  # fmt: skip
    return _options(query, table, rest[2:])


def _options(query: str, table: str | None, toks: list[Tok]) -> CopyStatement:
    opts: dict[str, object] = {}
    j = 0
    if j < len(toks) and toks[j].text == "with" and toks[j].kind == "word":
        j += 1
    if j < len(toks) and toks[j].text == "(":
        j += 1
        while j < len(toks) and toks[j].text != ")":
            name = toks[j].text
            j += 1
            value: object = True
            if j < len(toks) and toks[j].text == "(":  # FORCE_QUOTE (a, b)
                cols: list[str] = []
                j += 1
                while j < len(toks) and toks[j].text != ")":
                    if toks[j].text != ",":
                        cols.append(toks[j].text)
                    j += 1
                j += 1
                value = tuple(cols)
            elif j < len(toks) and toks[j].text not in (",", ")"):
                value = "*" if toks[j].text == "*" else toks[j].text
                j += 1
            opts[name] = value
            if j < len(toks) and toks[j].text == ",":
                j += 1
        if j >= len(toks):
            raise SqlSyntaxError("syntax error at end of input", hint="close the option list")
        j += 1
    else:  # the options of before PostgreSQL 9.0
        while j < len(toks):
            w = toks[j].text
            j += 1
            if w in ("binary", "csv"):
                opts["format"] = w
            elif w == "header":
                opts["header"] = True
            elif w in ("delimiter", "null", "quote", "escape", "encoding"):
                if j < len(toks) and toks[j].text == "as" and toks[j].kind == "word":
                    j += 1
                if j >= len(toks) or toks[j].kind != "str":
                    raise SqlSyntaxError(f"COPY {w.upper()} takes a string, e.g. ','")
                opts[w] = toks[j].text
                j += 1
            elif w == "force" and j < len(toks) and toks[j].text == "quote":
                j += 1
                if j < len(toks) and toks[j].text == "*":
                    opts["force_quote"] = "*"
                    j += 1
                else:
                    cols = []
                    while j < len(toks) and toks[j].kind in ("word", "qid"):
                        cols.append(toks[j].text)
                        j += 1
                        if j < len(toks) and toks[j].text == ",":
                            j += 1
                    opts["force_quote"] = tuple(cols)
            else:
                raise SqlSyntaxError(f'syntax error at or near "{w}"',
                                     hint="COPY (SELECT ...) TO STDOUT WITH (FORMAT csv, HEADER)")  # fmt: skip
    if j < len(toks):
        raise SqlSyntaxError(f'syntax error at or near "{toks[j].text}"')
    return _statement(query, table, opts)


def _bool(name: str, v: object) -> bool:
    if isinstance(v, bool):
        return v
    s = str(v).lower()
    if s in ("true", "on", "1", "yes"):
        return True
    if s in ("false", "off", "0", "no"):
        return False
    raise InvalidParameter(f"{name} requires a Boolean value")


def _char(name: str, v: object) -> str:
    s = str(v)
    if len(s.encode()) != 1:
        raise UnsupportedSql(f"COPY {name} must be a single one-byte character")
    return s


def _statement(query: str, table: str | None, opts: dict[str, object]) -> CopyStatement:
    known = {"format", "delimiter", "null", "header", "quote", "escape", "force_quote", "encoding"}
    for name in opts:
        if name not in known:
            raise SqlSyntaxError(f'option "{name}" not recognized',
                                 hint="COPY's options: " + ", ".join(sorted(known)))  # fmt: skip
    fmt = str(opts.get("format", "text")).lower()
    if fmt == "binary":
        raise UnsupportedSql("COPY in binary format is not supported by dpsql",
                             hint="use FORMAT csv or FORMAT text")  # fmt: skip
    if fmt not in ("text", "csv"):
        raise InvalidParameter(f'COPY format "{fmt}" not recognized',
                               hint="use FORMAT csv or FORMAT text")  # fmt: skip
    csv = fmt == "csv"
    enc = str(opts.get("encoding", "UTF8")).lower().replace("-", "").replace("_", "")
    if enc not in ("utf8", "unicode"):
        raise UnsupportedSql("COPY ENCODING other than UTF8 is not supported by dpsql",
                             hint="convert the file with your client (iconv)")  # fmt: skip
    delimiter = _char("delimiter", opts.get("delimiter", "," if csv else "\t"))
    if delimiter in "\r\n":
        raise InvalidParameter("COPY delimiter cannot be newline or carriage return")
    if not csv and delimiter in "\\.abcdefghijklmnopqrstuvwxyz0123456789":
        raise InvalidParameter(f'COPY delimiter cannot be "{delimiter}"')
    for name in ("quote", "escape", "force_quote"):
        if name in opts and not csv:
            raise UnsupportedSql(f"COPY {name} available only in CSV mode",
                                 hint="add FORMAT csv")  # fmt: skip
    quote = _char("quote", opts.get("quote", '"'))
    escape = _char("escape", opts.get("escape", quote))
    if csv and delimiter == quote:
        raise InvalidParameter("COPY delimiter and quote must be different")
    null = str(opts.get("null", "" if csv else "\\N"))
    fq = opts.get("force_quote", ())
    force: tuple[str, ...] | None = None
    if fq != "*":
        force = tuple(str(c) for c in fq) if isinstance(fq, tuple) else (str(fq),)
    return CopyStatement(query, table, csv, delimiter, null,
                         _bool("header", opts.get("header", False)), quote, escape, force)  # fmt: skip


# ---- writing --------------------------------------------------------------------------------
_TEXT_ESCAPES = {8: b"\\b", 9: b"\\t", 10: b"\\n", 11: b"\\v", 12: b"\\f", 13: b"\\r", 92: b"\\\\"}


def _text_value(v: bytes, delim: int) -> bytes:
    if not any(b in _TEXT_ESCAPES or b == delim for b in v):
        return v
    out = bytearray()
    for b in v:
        esc = _TEXT_ESCAPES.get(b)
        if esc is not None:
            out += esc
        elif b == delim:
            out += b"\\" + bytes((b,))
        else:
            out.append(b)
    return bytes(out)


def _csv_value(st: CopyStatement, v: bytes, force: bool) -> bytes:
    q, e, d = st.quote.encode(), st.escape.encode(), st.delimiter.encode()
    need = (
        force
        or v == st.null.encode()
        or v == b"\\."
        or any(x in v for x in (d, q, b"\n", b"\r"))
        or (e != q and e in v)
    )
    if not need:
        return v
    body = v.replace(e, e + e) if e != q else v
    return q + body.replace(q, e + q) + q


def copy_lines(
    st: CopyStatement, names: Sequence[str], rows: Sequence[Sequence[bytes | None]]
) -> list[bytes]:
    """The COPY lines (each ending in a newline) of ``rows`` (each value its PostgreSQL text,
    None for NULL), a header line of ``names`` first when asked, as PostgreSQL writes them."""
    null = st.null.encode()
    forced = [st.force_quote is None or n in st.force_quote for n in names]
    out: list[bytes] = []
    if st.csv:
        if st.header:
            out.append(st.delimiter.encode().join(_csv_value(st, n.encode(), False)
                                                  for n in names) + b"\n")  # fmt: skip
        for row in rows:
            vals = [null if v is None else _csv_value(st, v, f)
                    for v, f in zip(row, forced, strict=True)]  # fmt: skip
            out.append(st.delimiter.encode().join(vals) + b"\n")
        return out
    d = ord(st.delimiter)
    if st.header:
        out.append(st.delimiter.encode().join(_text_value(n.encode(), d) for n in names) + b"\n")
    for row in rows:
        out.append(st.delimiter.encode().join(
            null if v is None else _text_value(v, d) for v in row) + b"\n")  # fmt: skip
    return out


def copy_out_response(columns: int) -> bytes:
    """CopyOutResponse: text format, ``columns`` columns (each text)."""
    body = b"\x00" + _I16.pack(columns) + _I16.pack(0) * columns
    return b"H" + _I32.pack(len(body) + 4) + body


def copy_data(line: bytes) -> bytes:
    return b"d" + _I32.pack(len(line) + 4) + line


def private_table_refusal(
    st: CopyStatement, err: PrivacyViolation, key: str | None = None
) -> PrivacyViolation:
    """The words of ``COPY <private table> TO STDOUT``: its rows are what it would copy; the
    hint copies counts by ``key`` (a column with declared keys) when there is one."""
    by = key or "<column>"
    return PrivacyViolation(
        f"COPY {st.table} TO STDOUT would copy the rows of a private table",
        detail=err.message,
        hint=f"copy an aggregate of it instead: COPY (SELECT {by}, COUNT(*) FROM {st.table} "
        "GROUP BY 1) TO STDOUT WITH (FORMAT csv, HEADER)",
    )
