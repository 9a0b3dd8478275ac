"""`EXPLAIN [ ( option [, ...] ) ] statement` and `EXPLAIN [ ANALYZE ] [ VERBOSE ] statement`.

Splits an EXPLAIN into its options (validated as PostgreSQL validates them) and the text of the
statement it explains, which the engine prepares like any other statement. The options are
rendered back from this whitelist, never copied from the client's text.

>>> e = parse_explain("EXPLAIN (FORMAT JSON, costs off) SELECT 1")
>>> e.options.format, e.options.costs, e.statement, e.offset
('JSON', False, 'SELECT 1', 33)
>>> parse_explain("explain analyze verbose select 1").options.render()
'ANALYZE TRUE, VERBOSE TRUE'
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot.tokenizer_core import Token, TokenType

from dpsql.errors import InvalidParameter, SqlSyntaxError
from dpsql.sql.parse import tokenize

# PostgreSQL's EXPLAIN options (up to 17) and whether each takes a Boolean.
BOOLEAN_OPTIONS = (
    "ANALYZE", "VERBOSE", "COSTS", "SETTINGS", "GENERIC_PLAN", "BUFFERS", "WAL", "TIMING",
    "SUMMARY", "MEMORY",
)  # fmt: skip
FORMATS = ("TEXT", "XML", "JSON", "YAML")
_TRUE = frozenset({"TRUE", "ON", "1", "YES", "T", "Y"})
_FALSE = frozenset({"FALSE", "OFF", "0", "NO", "F", "N"})


@dataclass(frozen=True)
class ExplainOptions:
    """The options given, in order, normalized: ``(("ANALYZE", True), ("FORMAT", "JSON"))``."""

    given: tuple[tuple[str, bool | str], ...] = ()

    def get(self, name: str, default: bool | str) -> bool | str:
        for k, v in reversed(self.given):
            if k == name:
                return v
        return default

    @property
    def analyze(self) -> bool:
        return bool(self.get("ANALYZE", False))

    @property
    def verbose(self) -> bool:
        return bool(self.get("VERBOSE", False))

    @property
    def costs(self) -> bool:
        return bool(self.get("COSTS", True))

    @property
    def format(self) -> str:
        return str(self.get("FORMAT", "TEXT"))

    def with_option(self, name: str, value: bool | str) -> ExplainOptions:
        """A copy with ``name`` set to ``value`` (replacing what the client gave)."""
        return ExplainOptions(tuple((k, v) for k, v in self.given if k != name) + ((name, value),))

    def render(self) -> str:
        """The option list for PostgreSQL, from the normalized values only."""
        return ", ".join(
            f"{k} {v}" if isinstance(v, str) else f"{k} {'TRUE' if v else 'FALSE'}"
            for k, v in self.given
        )


@dataclass(frozen=True)
class ExplainStatement:
    """An EXPLAIN: its options, the explained statement's text and where that text starts."""

    options: ExplainOptions
    statement: str
    offset: int  # 0-based character offset of ``statement`` in the EXPLAIN's text


def parse_explain(text: str) -> ExplainStatement:
    """Split an EXPLAIN statement (first word EXPLAIN) into options and the explained statement.

    Raises:
        SqlSyntaxError: 42601, a malformed option list, an unknown option, nothing to explain.
        InvalidParameter: 22023, an option value PostgreSQL would refuse.
    """
    head = tokenize(text)
    if not head or head[0].text.upper() != "EXPLAIN":
        raise SqlSyntaxError("not an EXPLAIN statement")
    # sqlglot reads EXPLAIN as a command with the rest as one string: tokenize the rest.
    base = head[0].start + len("EXPLAIN")
    toks = [_shift(t, base) for t in tokenize(text[base:])]
    i = 0
    given: list[tuple[str, bool | str]] = []
    if i < len(toks) and toks[i].token_type == TokenType.L_PAREN:
        i = _option_list(toks, i + 1, given)
    else:
        if i < len(toks) and toks[i].text.upper() in ("ANALYZE", "ANALYSE"):
            given.append(("ANALYZE", True))
            i += 1
        if i < len(toks) and toks[i].text.upper() == "VERBOSE":
            given.append(("VERBOSE", True))
            i += 1
    if i >= len(toks) or toks[i].token_type == TokenType.SEMICOLON:
        raise SqlSyntaxError(
            "syntax error at end of input",
            position=len(text) + 1,
            hint="EXPLAIN takes a statement: EXPLAIN SELECT count(*) FROM t",
        )
    opts = ExplainOptions(tuple(given))
    _check_combination(opts)
    start = toks[i].start
    return ExplainStatement(opts, text[start:], start)


def _shift(tok: Token, base: int) -> Token:
    return Token(tok.token_type, tok.text, tok.line, tok.col, tok.start + base, tok.end + base)


def _option_list(toks: list[Token], i: int, given: list[tuple[str, bool | str]]) -> int:
    """Read ``name [value] {, name [value]} )`` from token ``i``; return the index after ``)``."""
    while True:
        if i >= len(toks):
            raise SqlSyntaxError("syntax error at end of input", hint="close the option list")
        name_tok = toks[i]
        name = name_tok.text.upper()
        if name_tok.token_type in (TokenType.COMMA, TokenType.R_PAREN, TokenType.STRING):
            raise SqlSyntaxError(
                f'syntax error at or near "{name_tok.text}"', position=name_tok.start + 1
            )
        name = "ANALYZE" if name == "ANALYSE" else name
        if name not in BOOLEAN_OPTIONS and name != "FORMAT":
            raise SqlSyntaxError(
                f'unrecognized EXPLAIN option "{name_tok.text.lower()}"',
                position=name_tok.start + 1,
                hint="options: " + ", ".join((*BOOLEAN_OPTIONS, "FORMAT")).lower(),
            )
        i += 1
        value = None
        if i < len(toks) and toks[i].token_type not in (TokenType.COMMA, TokenType.R_PAREN):
            value = toks[i].text.upper()
            i += 1
        given.append((name, _value(name, value)))
        if i < len(toks) and toks[i].token_type == TokenType.COMMA:
            i += 1
            continue
        if i < len(toks) and toks[i].token_type == TokenType.R_PAREN:
            return i + 1
        where = f'at or near "{toks[i].text}"' if i < len(toks) else "at end of input"
        raise SqlSyntaxError(f"syntax error {where}", hint="separate EXPLAIN options by commas")


def _value(name: str, value: str | None) -> bool | str:
    if name == "FORMAT":
        if value not in FORMATS:
            raise InvalidParameter(
                f'unrecognized value for EXPLAIN option "format": "{(value or "").lower()}"',
                hint="FORMAT TEXT, JSON, YAML or XML",
            )
        return value
    if value is None or value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise InvalidParameter(f"{name.lower()} requires a Boolean value", hint=f"{name} TRUE or FALSE")


def _check_combination(opts: ExplainOptions) -> None:
    """As PostgreSQL: WAL and TIMING need ANALYZE; GENERIC_PLAN excludes it."""
    for name in ("WAL", "TIMING"):
        if opts.get(name, False) and not opts.analyze:
            raise InvalidParameter(
                f"EXPLAIN option {name} requires ANALYZE", hint=f"EXPLAIN (ANALYZE, {name}) ..."
            )
    if opts.get("GENERIC_PLAN", False) and opts.analyze:
        raise InvalidParameter(
            "EXPLAIN options ANALYZE and GENERIC_PLAN cannot be used together",
            hint="drop one of them",
        )
