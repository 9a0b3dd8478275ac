"""Statement splitting and parsing (sqlglot, postgres dialect), with PostgreSQL-style errors."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from functools import lru_cache
from typing import ClassVar

import sqlglot
from sqlglot import exp
from sqlglot.dialects.postgres import Postgres
from sqlglot.errors import ParseError, TokenError
from sqlglot.tokenizer_core import Token, TokenType

from dpsql.errors import (
    DpsqlError,
    PrivacyViolation,
    ReadOnlyTransaction,
    SqlSyntaxError,
    UnsupportedSql,
)
from dpsql.sql.arities import check_calls, faithful_calls, unclosed
from dpsql.sql.dollar_quotes import check_dollar_quotes
from dpsql.sql.faithful import (
    date_calls,
    mark_calls,
    quoted_strings,
    refuse_empty_field,
    refuse_unreadable,
)
from dpsql.sql.formats import mark_formats
from dpsql.sql.known_functions import check_known_functions
from dpsql.sql.names import spell_functions
from dpsql.sql.pg_reading import check_same_constants, check_same_reading
from dpsql.sql.prescan import prescan
from dpsql.sql.respell import spell_array_types, unicode_escapes
from dpsql.sql.syntax_errors import check_empty_clauses, syntax_error

logging.getLogger("sqlglot").setLevel(logging.ERROR)

DIALECT = Postgres()

# First words of statements the wire session answers itself (never sent upstream as typed).
SESSION_WORDS = frozenset(
    {
        "SET",
        "SHOW",
        "RESET",
        "BEGIN",
        "START",
        "COMMIT",
        "END",
        "ROLLBACK",
        "ABORT",
        "SAVEPOINT",
        "RELEASE",
        "DISCARD",
        "DEALLOCATE",
        "CLOSE",
        "LISTEN",
        "UNLISTEN",
    }
)
QUERY_WORDS = frozenset({"SELECT", "WITH", "VALUES", "TABLE", "("})
WRITE_WORDS = frozenset(
    {
        "INSERT",
        "UPDATE",
        "DELETE",
        "MERGE",
        "CREATE",
        "DROP",
        "ALTER",
        "TRUNCATE",
        "COPY",
        "GRANT",
        "REVOKE",
        "VACUUM",
        "ANALYZE",
        "CLUSTER",
        "REINDEX",
        "COMMENT",
        "LOCK",
        "CALL",
        "DO",
        "IMPORT",
        "LOAD",
        "REFRESH",
        "SECURITY",
        "REASSIGN",
        "NOTIFY",
        "CHECKPOINT",
        "FETCH",
        "MOVE",
        "DECLARE",
    }
)


SQL_PREPARED_WORDS = frozenset({"PREPARE", "EXECUTE"})


def _sql_prepared_refusal(word: str, tokens: list[Token]) -> UnsupportedSql:
    """SQL-level PREPARE / EXECUTE (and PREPARE TRANSACTION): 0A000, as PostgreSQL words an
    unsupported feature. DEALLOCATE is a session statement (it closes protocol-level ones)."""
    rest = tokens[1].text.split(None, 1) if len(tokens) > 1 else []  # sqlglot: one COMMAND token
    if word == "PREPARE" and rest and rest[0].upper() == "TRANSACTION":
        return UnsupportedSql(
            "PREPARE TRANSACTION is not supported by dpsql",
            hint="dpsql is read-only: end the transaction with COMMIT or ROLLBACK",
        )
    return UnsupportedSql(
        f"SQL-level {word} is not supported by dpsql",
        hint="use your driver's prepared statements (the extended query protocol: Parse, Bind, "
        "Execute with $1, $2 parameters) instead",
    )


def _copy_or_do_refusal(word: str, tokens: list[Token]) -> DpsqlError:
    """``COPY ... TO`` reaching the engine (a form the wire's :mod:`dpsql.wire.copy_out` does
    not answer, or a client of the engine alone) is not supported (0A000): run the query
    itself; ``COPY ... FROM`` writes (25006); ``DO`` runs procedural code, not allowed (42501)."""
    if word == "DO":
        return PrivacyViolation(
            "DO is not allowed: dpsql runs no procedural code",
            hint="send the SELECT statements themselves",
        )
    depth = 0
    for tok in tokens[1:]:
        if tok.token_type == TokenType.L_PAREN:
            depth += 1
        elif tok.token_type == TokenType.R_PAREN:
            depth -= 1
        elif depth == 0 and tok.text.upper() == "FROM":
            return ReadOnlyTransaction(
                "COPY FROM is not allowed: dpsql answers read-only queries only",
                hint="data changes are made directly on the database by its owner",
            )
    return UnsupportedSql(
        "COPY is not supported here",
        hint="through `dpsql serve`, COPY (SELECT ...) TO STDOUT WITH (FORMAT csv, HEADER) "
        "answers (psql: \\copy); or run the SELECT itself and save its result with your "
        "client (psql: \\o FILE or \\g FILE)",
    )


def tokenize(text: str) -> list[Token]:
    """sqlglot's tokens of ``text``, its dollar quotes checked against PostgreSQL's reading
    (:func:`dpsql.sql.dollar_quotes.check_dollar_quotes`)."""
    try:
        tokens = list(DIALECT.tokenize(text))
    except TokenError as e:
        raise syntax_error(text, e) from e
    check_dollar_quotes(text, tokens)
    return tokens


def split_statements(text: str) -> list[str]:
    """Split a simple-query string into statement texts (quotes, dollar quotes, comments aware).

    >>> split_statements("select 'a;b'; select 2;")
    ["select 'a;b'", 'select 2']

    A text up to 4096 characters is split once and remembered (a client's simple queries
    repeat: the same text gives the same statements); a refused one is not remembered.

    Raises:
        ProgramLimitExceeded, StatementTooComplex: the text is over a limit of
            :func:`dpsql.sql.prescan.prescan` (checked before tokenizing).
        SqlSyntaxError: the text cannot be tokenized (an unterminated quote or comment).
    """
    if len(text) <= _MEMO_SPLIT:
        return list(_split_memo(text))
    return list(_split(text))


_MEMO_SPLIT = 4096  # characters of a text whose split is remembered


@lru_cache(maxsize=1024)
def _split_memo(text: str) -> tuple[str, ...]:
    return _split(text)


def _split(text: str) -> tuple[str, ...]:
    prescan(text)
    tokens = tokenize(text)
    out: list[str] = []
    start: int | None = None
    end = 0
    for tok in tokens:
        if tok.token_type == TokenType.SEMICOLON:
            if start is not None:
                out.append(text[start:end].strip())
            start = None
            continue
        if start is None:
            start = _token_start(text, tok)
        end = tok.end + 1
    if start is not None:
        out.append(text[start:end].strip())
    return tuple(out)


def _token_start(text: str, tok: Token) -> int:
    # Tokens of quoted strings report the start of their content; back up to the quote.
    s = tok.start
    while s > 0 and text[s - 1] in "'\"$Ee":
        s -= 1
        if text[s] in "'\"":
            break
    return s


@dataclass(frozen=True)
class ParsedQuery:
    """A query (``SELECT``, ``WITH``, ``VALUES``, ``TABLE``): its text (array types and
    ``U&""`` identifiers spelled out), first word and sqlglot tree; ``written``: that tree as
    dpsql writes it (``tree.sql(POSTGRES)``), where the constants check rendered it (a text
    not agreed before), else None. A prepared statement's fingerprint reuses it rather than
    rendering the same tree again (:func:`dpsql.execute.prepared.fingerprint`)."""

    text: str
    first_word: str
    tree: exp.Expr
    written: str | None = None


@dataclass(frozen=True)
class ParsedExplain:
    """``EXPLAIN <statement>``: :func:`dpsql.explain.run.prepare_explain` reads the rest."""

    text: str
    first_word: str = "EXPLAIN"
    tree: ClassVar[None] = None


@dataclass(frozen=True)
class ParsedSession:
    """A statement of the session (``SET``, ``SHOW``, ``BEGIN``, ...: :data:`SESSION_WORDS`)."""

    text: str
    first_word: str
    tree: ClassVar[None] = None


@dataclass(frozen=True)
class ParsedEmpty:
    """A statement of nothing but whitespace and comments."""

    text: str
    first_word: str = ""
    tree: ClassVar[None] = None


ParsedStatement = ParsedQuery | ParsedExplain | ParsedSession | ParsedEmpty
"""What :func:`parse_statement` makes of one statement's text, one class per kind (by its first
word; ``match`` on the class). The engine classifies it into a
:data:`dpsql.execute.prepared.Prepared`; the wire keeps either in its
:class:`dpsql.wire.engine_api.Statement`."""


_CREATE_AS = re.compile(
    r"create\s+(?:or\s+replace\s+)?(?:(?:temp|temporary|unlogged|materialized)\s+)*"
    r"(view|table)\b.*?\bas\s*\(?\s*((?:select|with)\b.*)$",
    re.IGNORECASE | re.DOTALL,
)


def _create_as_hint(text: str, tokens: list[Token]) -> str | None:
    """The hint for ``CREATE VIEW/TABLE ... AS <query>`` (dbt's view and table models, a BI
    tool's saved dataset): dpsql stores nothing, the query itself is what it answers; with
    dbt's comment, how to run the model without a write. None for any other write."""
    if not tokens or tokens[0].text.upper() != "CREATE":
        return None
    m = _CREATE_AS.match(text, tokens[0].start)  # (from CREATE: a leading comment is no token)
    if m is None:
        return None
    kind, query = m.group(1).lower(), m.group(2).strip().rstrip(";").strip()
    if m.group(0).lower().split(kind, 1)[1].split("as", 1)[1].strip().startswith("("):
        query = query.removesuffix(")").strip()
    query = " ".join(query.split())
    short = query if len(query) <= 200 else query[:197] + "..."
    hint = f"dpsql never stores a {kind}; run its query itself: {short}"
    if '"app": "dbt"' in text or "__dbt_tmp" in text:  # (a client may drop the comment)
        hint += (
            "; with dbt, materialize the model as ephemeral ({{ config(materialized="
            "'ephemeral') }}) or preview it with dbt show: both send only its SELECT"
        )
    return hint


def first_word(tokens: list[Token]) -> str:
    if not tokens:
        return ""
    t = tokens[0]
    if t.token_type == TokenType.L_PAREN:
        return "("
    return t.text.upper()


def parse_statement(text: str) -> ParsedStatement:
    """Parse one statement. Raises SqlSyntaxError (42601), a refusal for writes, or 54000/54001
    for a statement over the limits of :func:`dpsql.sql.prescan.prescan` (checked first)."""
    prescan(text)
    tokens = tokenize(text)
    word = first_word(tokens)
    if not tokens:
        return ParsedEmpty(text)
    if word in SESSION_WORDS:
        return ParsedSession(text, word)
    if word in SQL_PREPARED_WORDS:
        raise _sql_prepared_refusal(word, tokens)
    if word in ("COPY", "DO"):
        raise _copy_or_do_refusal(word, tokens)
    if word in WRITE_WORDS:
        raise ReadOnlyTransaction(
            f"{word} is not allowed: dpsql answers read-only queries only",
            hint=_create_as_hint(text, tokens)
            or "run SELECT queries with aggregates; data changes are made directly on the "
            "database by its owner",
        )
    if word == "EXPLAIN":
        return ParsedExplain(text, word)
    if word not in QUERY_WORDS:
        raise SqlSyntaxError(
            f'syntax error at or near "{tokens[0].text}"',
            position=tokens[0].start + 1,
            hint="dpsql answers SELECT queries",
        )
    spelled_from = text
    spelled = spell_array_types(text, tokens)
    if '&"' in spelled:  # U&"..." identifiers (rare: no second tokenizing otherwise)
        spelled = unicode_escapes(spelled, tokenize(spelled))
        # before sqlglot reads (and rewrites) the calls, on the text it reads: U&"r\006Fund"(a,
        # 1, 2) is round(a, 1, 2)
        left_open = check_calls(tokenize(spelled), spelled)
    else:
        left_open = check_calls(tokens, text)  # positions and arguments as the user wrote them
    text = spelled
    try:
        trees = sqlglot.parse(text, read=DIALECT)
    except ParseError as e:
        refuse_unreadable(tokens if text is spelled_from else tokenize(text))
        raise syntax_error(text, e) from e
    except ValueError:  # sqlglot's own check of what it builds (an empty date_part field)
        refuse_empty_field(tokens if text is spelled_from else tokenize(text))
        raise
    if left_open:  # sqlglot closed a call PostgreSQL leaves open
        raise unclosed(tokenize(text))
    found = [t for t in trees if t is not None]
    if len(found) != 1:
        raise SqlSyntaxError(
            "cannot insert multiple commands into a prepared statement",
            hint="send one statement at a time",
        )
    check_empty_clauses(found[0], text, tokens)
    # PostgreSQL runs this text: its own parser must read what sqlglot read
    pg = check_same_reading(text, found[0])
    check_known_functions(found[0])
    tree = fold_identifiers(date_calls(quoted_strings(found[0])))
    tree = fetch_as_limit(flatten_group_rows(tree))
    tree = mark_calls(tree, text, tokens if text is spelled_from else None)
    tree = mark_formats(tree, text, tokens if text is spelled_from else None)
    tree = faithful_calls(spell_functions(tree, text))
    written = check_same_constants(text, pg, tree)  # (None: this text passed both before)
    return ParsedQuery(text, word, tree, written)


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def fold_identifiers(tree: exp.Expr) -> exp.Expr:
    """Fold unquoted identifiers to lower case in place, as PostgreSQL does; quoted ones keep
    their case. Every later stage (classification, policy lookups, rewrites, labels) then sees
    PostgreSQL's names.

    Only ASCII letters fold (PostgreSQL's downcase_identifier with a multibyte encoding), and
    every identifier folds: unlike sqlglot's normalize_identifiers, no comment can exempt one.

    >>> fold_identifiers(sqlglot.parse_one('SELECT Amount AS "N" FROM T', read="postgres")).sql()
    'SELECT amount AS "N" FROM t'
    """
    for ident in tree.find_all(exp.Identifier):
        if not ident.quoted and isinstance(ident.this, str):
            ident.set("this", ident.this.translate(_ASCII_LOWER))
    return tree


def flatten_group_rows(tree: exp.Expr) -> exp.Expr:
    """``GROUP BY (a, b)`` is ``GROUP BY a, b`` in PostgreSQL (a parenthesized list at the top
    of GROUP BY is a list of keys, not a row value: parse_agg.c flatten_grouping_sets); sqlglot
    reads it as one row-valued key. Flattened in place; ``GROUP BY ()`` and the lists inside
    ROLLUP / CUBE / GROUPING SETS are left as they are.

    >>> q = sqlglot.parse_one("SELECT a, b FROM t GROUP BY (a, b), c", read="postgres")
    >>> flatten_group_rows(q).sql()
    'SELECT a, b FROM t GROUP BY a, b, c'
    """
    for group in tree.find_all(exp.Group):
        items = group.expressions
        if any(isinstance(e, exp.Tuple) and e.expressions for e in items):
            flat: list[exp.Expr] = []
            for e in items:
                flat.extend(e.expressions if isinstance(e, exp.Tuple) and e.expressions else [e])
            group.set("expressions", flat)
    return tree


def fetch_as_limit(tree: exp.Expr) -> exp.Expr:
    """``FETCH FIRST n ROWS ONLY`` (SQL standard; Hibernate 6 sends ``fetch first ? rows
    only``) is ``LIMIT n``, ``FETCH FIRST ROW ONLY`` ``LIMIT 1``, as PostgreSQL reads them;
    rewritten in place so every later stage sees one LIMIT. ``WITH TIES`` and ``PERCENT`` are
    not a LIMIT and are left as written.

    >>> q = sqlglot.parse_one("SELECT a FROM t OFFSET 1 ROWS FETCH NEXT 2 ROWS ONLY", read="postgres")
    >>> fetch_as_limit(q).sql("postgres")
    'SELECT a FROM t LIMIT 2 OFFSET 1'
    """
    for node in list(tree.find_all(exp.Fetch)):
        opts = node.args.get("limit_options")
        if opts is not None and (opts.args.get("with_ties") or opts.args.get("percent")):
            continue
        count = node.args.get("count")
        node.replace(exp.Limit(expression=count if count is not None else exp.Literal.number(1)))
    return tree
