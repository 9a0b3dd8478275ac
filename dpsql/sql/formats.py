"""The format strings of ``to_char``, ``to_date`` and ``to_timestamp`` sent as the user wrote them.

sqlglot reads a literal format into ``strftime`` terms and writes it back from them, which is not
the identity: ``'fmmonth'`` is read as ``f`` + ``mm`` (month number) + ``onth`` and written
``'fMMonth'`` (PostgreSQL answers ``f03onth`` where the user's statement answers ``march``),
text in double quotes is rewritten (``'"dd"'`` -> ``'"DD"'``), a ``%`` is taken for
``strftime``'s (``'%Y'`` -> ``'YYYY'``). A label built from such a format is another label,
a key derived from it another key. :func:`mark_formats` records on each call the format's text
as written (a plain ``'...'`` or dollar-quoted string); the PostgreSQL generator's transforms
registered here write it back byte for byte, and a format that is not a constant is written as
the expression it is (sqlglot's generator ran its ``strftime`` mapping over the expression's
SQL: ``'x' || '%d'`` became ``'x' || 'DD'``). Any other literal form of a format (``E'...'``)
is left to :func:`dpsql.sql.pg_reading.check_same_constants`, which refuses it where the value
sent would differ.

>>> import sqlglot
>>> text = "SELECT to_char(d, 'fmmonth \\"dd\\"'), to_date(s, 'yyyy-mm-dd') FROM t"
>>> mark_formats(sqlglot.parse_one(text, read="postgres"), text).sql("postgres")
'SELECT TO_CHAR(d, \\'fmmonth "dd"\\'), TO_DATE(s, \\'yyyy-mm-dd\\') FROM t'
"""

from __future__ import annotations

from collections.abc import Callable

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.generator import Generator
from sqlglot.tokenizer_core import Token, TokenType

FORMAT = "dpsql_format"  # the format string as written (its value), on the call's node

_CALLS: dict[type[exp.Expr], str] = {
    exp.TimeToStr: "TO_CHAR",
    exp.StrToDate: "TO_DATE",
    exp.StrToTime: "TO_TIMESTAMP",
}
_WORDS = ("to_char", "to_date", "to_timestamp")
_PLAIN = (TokenType.STRING, TokenType.HEREDOC_STRING)  # token text = the string's value
_OPEN = (TokenType.L_PAREN, TokenType.L_BRACKET)
_CLOSE = (TokenType.R_PAREN, TokenType.R_BRACKET)


def _second_argument(tokens: list[Token], i: int) -> list[Token] | None:
    """The tokens of the second argument of the call whose name is ``tokens[i]``, when it has
    exactly two arguments."""
    if i + 1 >= len(tokens) or tokens[i + 1].token_type != TokenType.L_PAREN:
        return None
    depth = 0
    args: list[list[Token]] = [[]]
    for tok in tokens[i + 1 :]:
        if tok.token_type in _OPEN:
            depth += 1
            if depth == 1:
                continue
        elif tok.token_type in _CLOSE:
            depth -= 1
            if depth == 0:
                return args[1] if len(args) == 2 else None
        elif tok.token_type == TokenType.COMMA and depth == 1:
            args.append([])
            continue
        args[-1].append(tok)
    return None


def mark_formats(tree: exp.Expr, text: str, tokens: list[Token] | None = None) -> exp.Expr:
    """Record on each ``to_char`` / ``to_date`` / ``to_timestamp`` call of ``tree`` (parsed from
    ``text``; ``tokens``: its tokens, or None to tokenize it) whose format is one plain or
    dollar-quoted string the format as written, in place."""
    lowered = text.lower()
    if not any(w in lowered for w in _WORDS):
        return tree
    nodes = [n for n in tree.find_all(*_CALLS) if isinstance(n.args.get("format"), exp.Literal)]
    if not nodes:
        return tree
    if tokens is None:
        tokens = list(Postgres().tokenize(text))
    at = {tok.start: i for i, tok in enumerate(tokens)}
    for node in nodes:
        i = at.get(node.meta.get("start", -1))
        if i is None or tokens[i].text.lower() not in _WORDS:
            continue
        arg = _second_argument(tokens, i)
        if arg is not None and len(arg) == 1 and arg[0].token_type in _PLAIN:
            node.meta[FORMAT] = arg[0].text
    return tree


def written_format(node: exp.Expr) -> str | None:
    """The format of a ``to_char`` / ``to_date`` / ``to_timestamp`` node as the user wrote it,
    when :func:`mark_formats` recorded it."""
    got = node.meta.get(FORMAT)
    return got if isinstance(got, str) else None


def _format_sql(self: Generator, e: exp.Expr) -> str | None:
    written = written_format(e)
    if written is not None:
        return self.sql(exp.Literal.string(written))
    if isinstance(e.args.get("format"), exp.Literal):
        return self.format_time(e)  # sqlglot's own (check_same_constants compares its value)
    return self.sql(e, "format") or None


def _transform(name: str) -> Callable[[Generator, exp.Expr], str]:
    def sql(self: Generator, e: exp.Expr) -> str:
        return str(self.func(name, e.this, _format_sql(self, e)))

    return sql


for _node, _name in _CALLS.items():
    Postgres.Generator.TRANSFORMS[_node] = _transform(_name)
