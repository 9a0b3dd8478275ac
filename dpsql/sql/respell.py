"""Token-level respellings of PostgreSQL syntax sqlglot can't parse, into forms it can that
PostgreSQL reads the same: ``U&"d\\0061t"`` identifiers, and ``oid[]``-style array types."""

from __future__ import annotations

from sqlglot.tokenizer_core import Token, TokenType

from dpsql.errors import SqlSyntaxError


def unicode_escapes(text: str, tokens: list[Token]) -> str:
    """``U&"d\\0061t"`` (with an optional ``UESCAPE 'c'``) -> the plain quoted identifier it
    spells, which sqlglot can parse (it reads ``U&'...'`` strings itself)."""
    edits: list[tuple[int, int, str]] = []
    for i in range(len(tokens) - 2):
        u, amp, q = tokens[i], tokens[i + 1], tokens[i + 2]
        if not (
            u.text in ("U", "u")
            and amp.token_type == TokenType.AMP
            and amp.start == u.end + 1
            and q.token_type == TokenType.IDENTIFIER
            and q.start == amp.end + 1
        ):
            continue
        end, escape = q.end + 1, "\\"
        if (
            i + 4 < len(tokens)
            and tokens[i + 3].text.upper() == "UESCAPE"
            and tokens[i + 4].token_type == TokenType.STRING
        ):
            esc = tokens[i + 4]
            escape, end = esc.text, text.index("'", esc.end) + 1
        value = _decode_unicode(q.text, escape, q.start + 1)
        edits.append((u.start, end, '"' + value.replace('"', '""') + '"'))
    for start, stop, repl in reversed(edits):
        text = text[:start] + repl + text[stop:]
    return text


def _decode_unicode(body: str, escape: str, at: int) -> str:
    if len(escape) != 1 or escape in "0123456789abcdefABCDEF+'\" \t\n\r":
        raise SqlSyntaxError("invalid Unicode escape character", position=at + 1)
    out: list[str] = []
    i = 0
    while i < len(body):
        ch = body[i]
        if ch != escape:
            out.append(ch)
            i += 1
            continue
        if body[i + 1 : i + 2] == escape:
            out.append(escape)
            i += 2
            continue
        digits = body[i + 2 : i + 8] if body[i + 1 : i + 2] == "+" else body[i + 1 : i + 5]
        width = 6 if body[i + 1 : i + 2] == "+" else 4
        if len(digits) != width or any(c not in "0123456789abcdefABCDEF" for c in digits):
            raise SqlSyntaxError(
                "invalid Unicode escape",
                hint="Unicode escapes must be \\XXXX or \\+XXXXXX.",
                position=at + i + 1,
            )
        code = int(digits, 16)
        if code == 0 or code > 0x10FFFF or 0xD800 <= code <= 0xDFFF:
            raise SqlSyntaxError("invalid Unicode escape value", position=at + i + 1)
        out.append(chr(code))
        i += 1 + (width + 1 if width == 6 else width)
    return "".join(out)


# Array types sqlglot 30 can't parse as `t[]`; PostgreSQL's own names for them are `_t`
# (asyncpg's type introspection sends `$1::oid[]`).
_ARRAY_SPELLED = frozenset(
    {"oid", "regclass", "regtype", "regproc", "regprocedure", "regnamespace", "regrole"}
)


def spell_array_types(text: str, tokens: list[Token]) -> str:
    """`oid[]` -> `_oid` (same type) where the tokens show a type name followed by `[]`."""
    edits: list[tuple[int, int, str]] = []
    for i in range(len(tokens) - 2):
        t, lb, rb = tokens[i], tokens[i + 1], tokens[i + 2]
        if (
            t.text.lower() in _ARRAY_SPELLED
            and t.token_type != TokenType.STRING
            and lb.token_type == TokenType.L_BRACKET
            and rb.token_type == TokenType.R_BRACKET
            and i > 0
            and tokens[i - 1].token_type in (TokenType.DCOLON, TokenType.ALIAS)
        ):
            edits.append((t.start, rb.end + 1, "_" + t.text.lower()))
    for start, end, repl in reversed(edits):
        text = text[:start] + repl + text[end:]
    return text


__all__ = ["spell_array_types", "unicode_escapes"]
