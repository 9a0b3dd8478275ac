"""Function calls checked as PostgreSQL checks them, before sqlglot rewrites them.

sqlglot reads a call of a function it knows into a node of its own, and writes that node back in
its own way: surplus arguments are dropped (``round(a, 1, 2)`` ran as ``ROUND(a, 1)``,
``log10(a, b)`` as ``LOG(10, a)``), missing ones filled in (``string_agg(s)`` ran as
``STRING_AGG(s, ',')``, ``array_length(a)`` as ``ARRAY_LENGTH(a, 1)``), other dialects' names
mapped to PostgreSQL's (``ifnull(a, b)`` ran as ``COALESCE(a, b)``, ``min(a, b)`` as
``LEAST(a, b)``), and calls PostgreSQL's grammar refuses accepted (``position(a, b)``,
``current_user()``, ``percentile_cont(x, 0.5)`` without ``WITHIN GROUP``). A statement must run
as written, so :func:`check_calls` refuses each of these as PostgreSQL refuses it, counted on
the tokens the user wrote (top-level commas between the call's parentheses).

:data:`ARITY` is PostgreSQL's own range of argument counts (``pg_proc``, PostgreSQL 15) for
every function whose name sqlglot reads into a node of its own; a call of a function sqlglot
does not know stays a call by that name (``exp.Anonymous``) and PostgreSQL checks it itself.
tests/integration/test_function_fidelity.py re-derives the table from the test cluster's
``pg_proc`` and runs every call shape both ways.
"""

from __future__ import annotations

from dataclasses import dataclass

from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.tokenizer_core import Token, TokenType

from dpsql.errors import (
    DpsqlError,
    FeatureNotSupported,
    SqlSyntaxError,
    UndefinedFunction,
    WrongObjectType,
)
from dpsql.sql.names import SPELLED

# (fewest, most) arguments PostgreSQL takes (None: variadic); written forms of the grammar's own
# (coalesce, greatest, ...) included. Ordered-set aggregates count their direct arguments.
ARITY: dict[str, tuple[int, int | None]] = {
    "abs": (1, 1), "acos": (1, 1), "acosh": (1, 1), "array_agg": (1, 1), "array_append": (2, 2),
    "array_cat": (2, 2), "array_length": (2, 2), "array_position": (2, 3),
    "array_prepend": (2, 2), "array_remove": (2, 2), "array_to_string": (2, 3), "ascii": (1, 1),
    "asin": (1, 1), "asinh": (1, 1), "atan": (1, 1), "atan2": (2, 2), "atanh": (1, 1),
    "avg": (1, 1), "bit_and": (1, 1), "bit_length": (1, 1), "bit_or": (1, 1), "bit_xor": (1, 1),
    "bool_and": (1, 1), "bool_or": (1, 1), "btrim": (1, 2), "cbrt": (1, 1), "ceil": (1, 1),
    "ceiling": (1, 1), "char_length": (1, 1), "character_length": (1, 1), "chr": (1, 1),
    "concat": (1, None), "concat_ws": (2, None), "convert": (3, 3), "corr": (2, 2),
    "cos": (1, 1), "cosh": (1, 1), "cot": (1, 1), "count": (0, 1), "covar_pop": (2, 2),
    "covar_samp": (2, 2), "cume_dist": (0, None), "current_database": (0, 0),
    "current_schema": (0, 0), "current_schemas": (1, 1), "date": (1, 1), "date_bin": (3, 3),
    "date_part": (2, 2), "date_trunc": (2, 3), "decode": (2, 2), "degrees": (1, 1),
    "dense_rank": (0, None), "div": (2, 2), "encode": (2, 2), "exp": (1, 1), "extract": (2, 2),
    "factorial": (1, 1), "first_value": (1, 1), "floor": (1, 1), "format": (1, None),
    "gen_random_uuid": (0, 0), "generate_series": (2, 3), "get_bit": (2, 2), "host": (1, 1),
    "initcap": (1, 1), "json_agg": (1, 1), "json_extract_path": (2, None),
    "json_extract_path_text": (2, None), "json_object": (1, 2), "json_object_agg": (2, 2),
    "json_strip_nulls": (1, 1), "jsonb_contains": (2, 2), "jsonb_exists": (2, 2),
    "jsonb_object_agg": (2, 2), "justify_days": (1, 1), "justify_hours": (1, 1),
    "justify_interval": (1, 1), "lag": (1, 3), "last_value": (1, 1), "lead": (1, 3),
    "left": (2, 2), "length": (1, 2), "like": (2, 2), "ln": (1, 1), "log": (1, 2),
    "log10": (1, 1), "lower": (1, 1), "lpad": (2, 3), "ltrim": (1, 2), "make_interval": (0, 7),
    "make_time": (3, 3), "make_timestamp": (6, 6), "max": (1, 1), "md5": (1, 1), "min": (1, 1),
    "mod": (2, 2), "mode": (0, 0), "normalize": (1, 2), "now": (0, 0), "nth_value": (2, 2),
    "ntile": (1, 1), "overlaps": (4, 4), "overlay": (3, 4), "percent_rank": (0, None),
    "percentile_cont": (1, 1), "percentile_disc": (1, 1), "pi": (0, 0), "position": (2, 2),
    "pow": (2, 2), "power": (2, 2), "radians": (1, 1), "random": (0, 0), "rank": (0, None),
    "regexp_count": (2, 4), "regexp_instr": (2, 7), "regexp_like": (2, 3),
    "regexp_replace": (3, 6), "regexp_substr": (2, 6), "regr_avgx": (2, 2), "regr_avgy": (2, 2),
    "regr_count": (2, 2), "regr_intercept": (2, 2), "regr_r2": (2, 2), "regr_slope": (2, 2),
    "regr_sxx": (2, 2), "regr_sxy": (2, 2), "regr_syy": (2, 2), "repeat": (2, 2),
    "replace": (3, 3), "reverse": (1, 1), "right": (2, 2), "round": (1, 2), "row_number": (0, 0),
    "rpad": (2, 3), "rtrim": (1, 2), "sha256": (1, 1), "sha384": (1, 1), "sha512": (1, 1),
    "sign": (1, 1), "sin": (1, 1), "sinh": (1, 1), "split_part": (3, 3), "sqrt": (1, 1),
    "starts_with": (2, 2), "stddev": (1, 1), "stddev_pop": (1, 1), "stddev_samp": (1, 1),
    "string_agg": (2, 2), "string_to_array": (2, 3), "strpos": (2, 2), "substr": (2, 3),
    "substring": (2, 3), "sum": (1, 1), "tan": (1, 1), "tanh": (1, 1), "to_char": (2, 2),
    "to_date": (2, 2), "to_hex": (1, 1), "to_number": (2, 2), "to_timestamp": (1, 2),
    "translate": (3, 3), "trunc": (1, 2), "unnest": (1, None), "upper": (1, 1),
    "var_pop": (1, 1), "var_samp": (1, 1), "variance": (1, 1), "version": (0, 0),
    "width_bucket": (2, 4),
    # the grammar's own (not in pg_proc)
    "coalesce": (1, None), "greatest": (1, None), "least": (1, None), "nullif": (2, 2),
    "grouping": (1, None), "trim": (1, 2), "current_timestamp": (1, 1), "current_time": (1, 1),
    "localtimestamp": (1, 1), "localtime": (1, 1),
    # dpsql's own: MEDIAN(x), answered as percentile_cont(0.5) WITHIN GROUP (ORDER BY x)
    "median": (1, 1),
}  # fmt: skip

# Ordered-set aggregates: PostgreSQL requires WITHIN GROUP (ORDER BY ...) after the call.
ORDERED_SET = frozenset({"percentile_cont", "percentile_disc", "mode"})
# Keywords PostgreSQL's grammar takes with no parentheses (a call of them is a syntax error), and
# type names it reads as a type, not a function, before "(".
_NO_CALL = {
    "current_user": "write CURRENT_USER without parentheses",
    "session_user": "write SESSION_USER without parentheses",
    "user": "write USER without parentheses",
    "current_role": "write CURRENT_ROLE without parentheses",
    "current_catalog": "write CURRENT_CATALOG without parentheses",
    "current_date": "write CURRENT_DATE without parentheses",
    "char": "char is a type: write CAST(x AS char(n)), or chr(n) for the character with code n",
    "interval": "write INTERVAL '7 days', or make_interval(days => 7)",
    "time": "write CAST(x AS time), or x::time",
    "timestamp": "write CAST(x AS timestamp), or x::timestamp",
}
# Functions PostgreSQL's grammar takes with keywords between the arguments only.
_KEYWORD_FORM = {
    "position": "write position(substring IN string), or strpos(string, substring)",
    "extract": "write EXTRACT(field FROM value), e.g. EXTRACT(year FROM d), or "
    "date_part('year', d)",
}
# Other databases' names sqlglot maps to a PostgreSQL function, and what to write instead.
_INSTEAD = {
    "ifnull": "COALESCE(a, b)",
    "nvl": "COALESCE(a, b)",
    "isnull": "COALESCE(a, b)",
    "iif": "CASE WHEN c THEN a ELSE b END",
    "if": "CASE WHEN c THEN a ELSE b END",
    "len": "length(s)",
    "instr": "strpos(s, sub)",
    "charindex": "strpos(s, sub)",
    "log2": "log(2, x)",
    "datediff": "date subtraction (d2 - d1) or age(t2, t1)",
    "date_add": "d + INTERVAL '1 day'",
    "date_sub": "d - INTERVAL '1 day'",
    "hex": "to_hex(n)",
}
_SPECIAL = frozenset(
    {
        TokenType.FROM,
        TokenType.FOR,
        TokenType.IN,
        TokenType.SIMILAR_TO,
        TokenType.ESCAPE,
    }
)
_SPECIAL_WORDS = frozenset({"placing", "both", "leading", "trailing", "similar", "from", "for"})
# The calls whose grammar takes those keywords in place of commas: only there do they make the
# comma count meaningless (round(x, 1, 2 IN (2)) has 3 arguments: were it skipped, sqlglot
# dropped the third).
_FORMS = frozenset({"substring", "trim", "position", "overlay", "extract"})
_NOT_NAMES = frozenset(
    {
        TokenType.STRING,
        TokenType.AND,
        TokenType.OR,
        TokenType.CASE,
        TokenType.COLLATE,
        TokenType.VARIADIC,
        TokenType.FIRST,
        TokenType.NEXT,
    }
)
# Keywords that are both an infix operator and a function's name (like(s, p), overlaps(a, b, c,
# d)): after an operand they are the operator, and their bracket opens an operand, not a call.
_INFIX = frozenset({TokenType.LIKE, TokenType.OVERLAPS})
_OPERAND_ENDS = frozenset(
    {
        TokenType.STRING,
        TokenType.NUMBER,
        TokenType.VAR,
        TokenType.IDENTIFIER,
        TokenType.R_PAREN,
        TokenType.R_BRACKET,
        TokenType.NULL,
        TokenType.TRUE,
        TokenType.FALSE,
        TokenType.PARAMETER,
        TokenType.PLACEHOLDER,
    }
)
_OPEN = (TokenType.L_PAREN, TokenType.L_BRACKET, TokenType.L_BRACE)
_CLOSE = (TokenType.R_PAREN, TokenType.R_BRACKET, TokenType.R_BRACE)


def _sqlglot_names() -> frozenset[str]:
    parser = Postgres.Parser
    names = {*parser.FUNCTIONS, *parser.FUNCTION_PARSERS, *parser.NO_PAREN_FUNCTION_PARSERS}
    return frozenset(n.lower() for n in names)


# Names sqlglot reads into a node of its own that PostgreSQL has no function of: refused (42883).
NOT_POSTGRES = _sqlglot_names() - set(ARITY) - set(_NO_CALL) - set(_KEYWORD_FORM) - {
    "cast", "exists", "array", "row", "any", "all", "some", "xmlelement", "xmlforest",
    "xmlparse", "xmlpi", "xmlroot", "xmlserialize", "xmlagg", "xmlconcat", "xmlexists",
    "collation", "treat", "json_array", "json_arrayagg", "json_objectagg", "json_query",
    "json_value", "json_exists", "json_table", "json_scalar", "json_serialize", "json",
    "values", "filter", "over", "within", "nextval", "currval", "setval",
}  # fmt: skip


def check_calls(tokens: list[Token], text: str = "") -> bool:
    """Refuse a call PostgreSQL would refuse where sqlglot would run something else (see the
    module docstring): a wrong number of arguments (42883), a name PostgreSQL has no function of
    (42883), a quoted name that is not in lowercase (42883: ``"ROUND"(a)`` is not round), a
    keyword or type called as a function (42601), an ordered-set aggregate without
    ``WITHIN GROUP`` (42809). Returns whether a bracket is left open (PostgreSQL refuses the
    statement; sqlglot closes some calls itself: ``string_agg(s FROM t`` was read as
    ``STRING_AGG(s, ',') FROM t``): the caller refuses it (:func:`unclosed`).

    >>> from dpsql.sql.parse import tokenize
    >>> check_calls(tokenize("SELECT round(a, 1), substring(s FROM 1 FOR 2) FROM t"))
    False
    >>> check_calls(tokenize("SELECT string_agg(s, ',' ORDER BY a, b) FROM t"))
    False
    >>> check_calls(tokenize("SELECT string_agg(s FROM t"))
    True
    >>> check_calls(tokenize("SELECT ROUND(a, (1, 2)[1], 2) FROM t"))
    Traceback (most recent call last):
    ...
    dpsql.errors.UndefinedFunction: function round with 3 arguments does not exist
    """
    frames: list[_Frame] = []
    for i, tok in enumerate(tokens):
        if tok.token_type in _OPEN:
            frames.append(_Frame(_called(tokens, i), i))
            continue
        if not frames:
            continue
        frame = frames[-1]
        if tok.token_type in _CLOSE:
            frames.pop()
            if frame.name:
                args = 0 if i == frame.at + 1 else frame.commas + 1
                _check(frame.name, args, frame.special, tokens, frame.at, i, text)
                if frame.name == "regexp_like" and args == 3:
                    _check_flags(tokens[frame.last_comma + 1 : i], tokens[frame.at - 1])
        elif not frame.name or frame.ordered:
            continue
        elif tok.token_type == TokenType.COMMA:
            frame.commas += 1
            frame.last_comma = i
        elif tok.token_type == TokenType.ORDER_BY:
            frame.ordered = True  # string_agg(s, ',' ORDER BY a, b): the arguments end here
        elif frame.name in _FORMS and (
            tok.token_type in _SPECIAL or tok.text.lower() in _SPECIAL_WORDS
        ):
            frame.special = True
    return bool(frames)


def unclosed(tokens: list[Token]) -> SqlSyntaxError:
    """The refusal of a statement whose brackets are not all closed (:func:`check_calls`)."""
    return SqlSyntaxError(
        "syntax error at end of input",
        position=tokens[-1].end + 2 if tokens else 1,
        hint="close every parenthesis the statement opens",
    )


@dataclass
class _Frame:
    """One open bracket: the function it calls ("" for none), its ``(`` token's index, the
    top-level commas seen, whether an ORDER BY ended the arguments or a keyword (FROM, IN,
    PLACING, ...) makes it one of the grammar's own forms."""

    name: str
    at: int
    commas: int = 0
    last_comma: int = 0
    ordered: bool = False
    special: bool = False


def faithful_calls(tree: exp.Expr) -> exp.Expr:
    """Calls sqlglot would write as another function, kept as written (in place): ``to_hex(n)``
    (sqlglot writes ``HEX(n)``, which PostgreSQL does not have).

    >>> import sqlglot
    >>> from dpsql.sql.names import spell_functions
    >>> text = "SELECT to_hex(255)"
    >>> faithful_calls(spell_functions(sqlglot.parse_one(text, read="postgres"), text)).sql()
    'SELECT TO_HEX(255)'
    """
    for node in list(tree.find_all(exp.Hex)):
        if node.meta.get(SPELLED) == "to_hex":
            call = exp.Anonymous(this="to_hex", expressions=[node.this])
            call.meta.update(node.meta)
            if node is tree:
                return call
            node.replace(call)
    return tree


# Tokens after which a quoted name with a column list is a name, not a call: FROM t "Sum"(a),
# (SELECT ...) "Sum"(a), WITH "Sum"(a) AS (...)
_BEFORE_ALIAS = (TokenType.VAR, TokenType.IDENTIFIER, TokenType.R_PAREN, TokenType.WITH)


def _called(tokens: list[Token], i: int) -> str:
    """The function name before ``tokens[i]`` (an opening bracket), or "" when it opens no
    call this module checks (a type's modifiers after ``::`` or ``AS``, a typed literal)."""
    if tokens[i].token_type != TokenType.L_PAREN or i == 0:
        return ""
    before = tokens[i - 1]
    name = before.text.lower()
    if before.token_type in _NOT_NAMES:
        return ""  # a AND (b), CASE (x) WHEN, FETCH FIRST (5) ROWS: keywords, not calls
    if before.token_type in _INFIX and _after_operand(tokens, i - 1):
        return ""  # s LIKE ('a%'), s NOT LIKE (p), (a, b) OVERLAPS (c, d): operators, not calls
    if name not in ARITY and name not in NOT_POSTGRES and name not in _NO_CALL:
        return ""
    prev = tokens[i - 2] if i >= 2 else None
    if prev is not None and prev.token_type in (TokenType.DCOLON, TokenType.ALIAS, TokenType.DOT):
        return ""  # x::numeric(10, 2), CAST(x AS char(2)), AS t(a, b), schema.f(...)
    if (
        before.token_type == TokenType.IDENTIFIER
        and before.text != name
        and name not in _NO_CALL
        and not (prev is not None and prev.token_type in _BEFORE_ALIAS)
    ):
        # "ROUND"(a, 1) calls a function named ROUND, which PostgreSQL does not have; sqlglot
        # reads it as round and wrote ROUND(a, 1)
        raise UndefinedFunction(
            f'function "{before.text}" does not exist',
            position=before.start + 1,
            hint=f"PostgreSQL's functions are named in lowercase: write {name}(...)",
        )
    return name


def _after_operand(tokens: list[Token], k: int) -> bool:
    """Whether ``tokens[k]`` follows an operand (skipping a ``NOT``): ``s LIKE``, ``s NOT LIKE``
    and ``) OVERLAPS`` are operators; ``like(`` opening an expression is a call."""
    k -= 1
    if k >= 0 and tokens[k].token_type == TokenType.NOT:
        k -= 1
    return k >= 0 and tokens[k].token_type in _OPERAND_ENDS


def _check(
    name: str, args: int, special: bool, tokens: list[Token], at: int, end: int, text: str
) -> None:
    position = tokens[at - 1].start + 1
    after = tokens[end + 1] if end + 1 < len(tokens) else None
    if name in _NO_CALL:
        if after is not None and after.token_type == TokenType.STRING:
            return  # TIMESTAMP(3) '2024-01-01 10:00': a typed literal with a precision
        raise SqlSyntaxError(
            'syntax error at or near "("', position=tokens[at].start + 1, hint=_NO_CALL[name]
        )
    if name == "current_timestamp":
        raise FeatureNotSupported(
            "CURRENT_TIMESTAMP with a precision is not supported by dpsql",
            position=position,
            hint=f"write CAST(CURRENT_TIMESTAMP AS timestamptz({_text(tokens, at, end)}))",
        )
    if name in NOT_POSTGRES:
        instead = _INSTEAD.get(name)
        raise UndefinedFunction(
            f"function {name} does not exist",
            position=position,
            hint=f"{name} is not a PostgreSQL function: write {instead}"
            if instead
            else f"{name} is not a PostgreSQL function: dpsql runs your statement on PostgreSQL",
        )
    if name in _KEYWORD_FORM and (args > 1 or (not special and args > 0)):
        # position(a IN b), EXTRACT(f FROM x): never a comma, even beside an IN or a FROM
        comma = next(
            (t for t in tokens[at + 1 : end] if t.token_type == TokenType.COMMA), tokens[end]
        )
        raise SqlSyntaxError(
            f'syntax error at or near "{comma.text}"',
            position=comma.start + 1,
            hint=_KEYWORD_FORM[name],
        )
    if name in ORDERED_SET and not (after is not None and after.text.upper() == "WITHIN"):
        raise WrongObjectType(
            f"WITHIN GROUP is required for ordered-set aggregate {name}",
            position=position,
            hint=_within_group_hint(name, _arguments(tokens, at, end, text)),
        )
    if special:
        return  # substring(s FROM 1 FOR 2), trim(BOTH 'x' FROM s): the grammar's own forms
    if name == "count" and args > 1 and tokens[at + 1].token_type == TokenType.DISTINCT:
        raise _several_distinct(tokens, at, end, text)
    low, high = ARITY[name]
    if args < low or (high is not None and args > high):
        raise _count_error(name, args, low, high, position)
    if name == "like":
        # sqlglot reads like(s, p) as SQLite's like(pattern, string): it ran as p LIKE s
        s, p = _arguments(tokens, at, end, text)
        raise FeatureNotSupported(
            "the function form like(string, pattern) is not supported by dpsql",
            position=position,
            hint=f"write the operator: {s} LIKE {p}",
        )


def _check_flags(flags: list[Token], name: Token) -> None:
    """regexp_like's flags: sqlglot writes the call as ``s ~ p`` or ``s ~* p`` and drops any
    flag but "i" and "c" (``regexp_like(s, p, 'x')`` ran as ``s ~ p``); refused (0A000)."""
    if len(flags) == 1 and flags[0].token_type == TokenType.STRING and flags[0].text in ("i", "c"):
        return
    raise FeatureNotSupported(
        "regexp_like with flags other than 'i' or 'c' is not supported by dpsql",
        position=name.start + 1,
        hint="write regexp_like(s, pattern) or regexp_like(s, pattern, 'i'), or the operators "
        "s ~ pattern and s ~* pattern",
    )


def _arguments(tokens: list[Token], at: int, end: int, text: str) -> list[str]:
    """The texts of the call's top-level arguments, as written in ``text`` (else the tokens
    joined by spaces)."""
    bounds, depth = [at], 0
    for j in range(at + 1, end):
        t = tokens[j]
        depth += t.token_type in _OPEN
        depth -= t.token_type in _CLOSE
        if depth == 0 and t.token_type == TokenType.COMMA:
            bounds.append(j)
    bounds.append(end)
    out = []
    for a, b in zip(bounds, bounds[1:], strict=False):
        if b == a + 1:
            continue
        if text:
            out.append(text[tokens[a].end + 1 : tokens[b].start].strip())
        else:
            out.append(" ".join(t.text for t in tokens[a + 1 : b]))
    return out


def _within_group_hint(name: str, args: list[str]) -> str:
    """``percentile_cont(0.5)`` -> ``percentile_cont(0.5) WITHIN GROUP (ORDER BY col)``;
    ``percentile_cont(x, 0.5)`` -> ``percentile_cont(0.5) WITHIN GROUP (ORDER BY x)``;
    ``mode(x)`` -> ``mode() WITHIN GROUP (ORDER BY x)``."""
    if name == "mode":
        direct, of = "", args[0] if args else "col"
    elif len(args) == 2:
        direct, of = args[1], args[0]
    else:
        direct, of = ", ".join(args), "col"
    tail = ", with the column to take it of" if of == "col" else ""
    return f"write {name}({direct}) WITHIN GROUP (ORDER BY {of}){tail}"


def _several_distinct(tokens: list[Token], at: int, end: int, text: str) -> DpsqlError:
    """``COUNT(DISTINCT a, b)``: sqlglot counts the distinct rows (a, b), which PostgreSQL's
    count of one argument does not take; said as the private path says it (0A000)."""
    args = _arguments(tokens, at, end, text)
    args[0] = args[0].split(None, 1)[1] if " " in args[0] else args[0]  # after DISTINCT
    cols = ", ".join(args)
    written = (
        text[tokens[at - 1].start : tokens[end].end + 1] if text else f"COUNT(DISTINCT {cols})"
    )
    return FeatureNotSupported(
        f"{' '.join(written.split())}: COUNT(DISTINCT ...) of several columns is not supported",
        position=tokens[at - 1].start + 1,
        hint=f"count one: COUNT(DISTINCT {args[0]}); or count the rows of each combination: "
        f"SELECT {cols}, COUNT(*) ... GROUP BY {cols}",
    )


def _text(tokens: list[Token], at: int, end: int) -> str:
    return " ".join(t.text for t in tokens[at + 1 : end])


def _count_error(name: str, args: int, low: int, high: int | None, position: int) -> DpsqlError:
    words = f"{args} argument" + ("" if args == 1 else "s")
    surplus = high is not None and args > high
    limit = high if surplus and high is not None else low
    takes = f"{limit} argument" + ("" if limit == 1 else "s")
    return UndefinedFunction(
        f"function {name} with {words} does not exist",
        position=position,
        hint=f"{name.upper()} takes "
        + ("no arguments" if limit == 0 else ("at most " if surplus else "at least ") + takes),
    )
