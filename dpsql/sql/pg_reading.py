"""PostgreSQL's own reading of a statement, and the check that dpsql reads it the same way.

dpsql decides what a statement reads (public, catalog or private tables) from sqlglot's parse;
PostgreSQL runs the text through its own lexer and grammar. Wherever the two read one text
differently, a statement dpsql judged public can read a private table upstream (bi26's no-break
space in a dollar-quote tag: sqlglot read a public statement on ``regions``, PostgreSQL ran a
``UNION`` returning every e-mail of ``purchases``). :func:`pg_reading` is PostgreSQL's reading,
from PostgreSQL's own parser (libpg_query through pglast): the number of statements, the kind of
each, every relation named anywhere (``FROM``, ``JOIN``, subqueries, CTEs, set operations,
``INSERT`` targets), and its parse tree, whose constants dpsql.sql.pg_constants reads.
:func:`check_same_reading` compares it with sqlglot's tree and refuses where they differ;
:func:`check_same_constants` compares its constants with those of the SQL dpsql writes from its
final parse of the text (the SQL every answer is built from) and refuses where they differ.

libpg_query 8.7 carries PostgreSQL 18's grammar; the upstream is PostgreSQL 15. Their lexers
differ on numbers: PostgreSQL 16 reads ``0x1f``, ``0o17``, ``0b101`` and ``1_000`` as integers,
PostgreSQL 15 refuses each ("trailing junk after numeric literal", 42601); PostgreSQL 16 takes a
vertical tab for a space, 15 refuses it outside strings and comments: so does this check.
Grammar PostgreSQL 16-18 added (``JSON_TABLE``, ``MERGE ... RETURNING``) is read here where
PostgreSQL 15 refuses it: no leak, PostgreSQL 15 runs nothing of it.

>>> sorted(pg_reading("SELECT a FROM s.t JOIN u ON true WHERE b = 'x'").relations)
[('', '', 'u'), ('', 's', 't')]
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass
from typing import Any

from pglast import parser as pg_parser
from sqlglot import exp

from dpsql.errors import FeatureNotSupported, SqlSyntaxError
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.pg_constants import Fact, constants, differing, hint_for, tree_nodes, written
from dpsql.sql.prescan import kept_text

Relation = tuple[str, str, str]  # (catalog, schema, name), "" where not written


@dataclass(frozen=True)
class PgReading:
    """What PostgreSQL's parser makes of a text: statements, kinds (``SelectStmt``, ...: every
    statement node anywhere, a data-modifying CTE's too), relations, constants."""

    statements: int
    kinds: frozenset[str]
    relations: frozenset[Relation]
    stmts: tuple[Any, ...]  # PostgreSQL's parse tree (pglast's JSON), read by constants()

    def constants(self) -> Counter[Fact]:
        """The constants PostgreSQL reads, with their contexts (dpsql.sql.pg_constants)."""
        return constants(list(self.stmts))


_STATEMENT_NODES = frozenset({"SelectStmt", "InsertStmt", "UpdateStmt", "DeleteStmt", "MergeStmt"})
# PostgreSQL 16+ number forms PostgreSQL 15 refuses (checked only where the text may hold one)
_NEW_NUMBER_HINT = re.compile(r"[0-9]_|0[xXoObB]")
_NEW_NUMBER = re.compile(r"0[xXoObB]|_")


def pg_reading(text: str) -> PgReading:
    """PostgreSQL's reading of ``text``. Raises SqlSyntaxError (42601) where PostgreSQL 15's
    parser refuses it, with PostgreSQL's words and position."""
    try:
        tree = json.loads(pg_parser.parse_sql_json(text))
    except pg_parser.ParseError as e:
        at = e.args[1] if len(e.args) > 1 and isinstance(e.args[1], int) else None
        raise SqlSyntaxError(
            str(e.args[0]),
            position=None if at is None else at + 1,
            hint="PostgreSQL's own parser stops at the position shown: correct the statement there",
        ) from e
    if "\v" in text or _NEW_NUMBER_HINT.search(text):
        _pg15_lexer(text)
    stmts = tree.get("stmts", [])
    kinds: set[str] = set()
    relations: set[Relation] = set()
    stack: list[Any] = [s.get("stmt", {}) for s in stmts]
    for node in tree_nodes(stack):
        if "relname" in node and "relpersistence" in node:  # a RangeVar (wrapped or a field)
            relations.add(
                (node.get("catalogname", ""), node.get("schemaname", ""), node["relname"])
            )
        for key, val in node.items():
            if key in _STATEMENT_NODES:
                kinds.add(key)
            elif key in ("A_Const", "TypeName", "typeName"):
                continue  # constants() reads them
            if isinstance(val, (dict, list)):
                stack.append(val)
    return PgReading(len(stmts), frozenset(kinds), frozenset(relations), tuple(stmts))


def _pg15_lexer(text: str) -> None:
    """Refuse what PostgreSQL 15's lexer refuses and PostgreSQL 16+'s reads (libpg_query's
    scanner is 18's): the new integer forms, and a vertical tab outside a string, quoted name
    or comment (whitespace since 16). Scan offsets are characters, ends inclusive."""
    covered: list[tuple[int, int]] = []
    for tok in pg_parser.scan(text):
        written = text[tok.start : tok.end + 1]
        if tok.name in ("ICONST", "FCONST") and _NEW_NUMBER.search(written):
            raise SqlSyntaxError(
                f'trailing junk after numeric literal at or near "{written}"',
                position=tok.start + 1,
                hint="write the number in decimal digits without underscores "
                "(PostgreSQL 15 reads no other form)",
            )
        covered.append((tok.start, tok.end))
    for i, ch in enumerate(text):
        if ch == "\v" and not any(a <= i <= b for a, b in covered):
            raise SqlSyntaxError(
                'syntax error at or near "\v"',
                position=i + 1,
                hint="PostgreSQL 15 takes no vertical tab for a space: write a space",
            )


_ASCII_LOWER = str.maketrans("ABCDEFGHIJKLMNOPQRSTUVWXYZ", "abcdefghijklmnopqrstuvwxyz")


def _name(ident: exp.Expr | None) -> str:
    if not isinstance(ident, exp.Identifier):
        return ""
    name = str(ident.this)
    return name if ident.quoted else name.translate(_ASCII_LOWER)


_DML_KINDS: dict[type[exp.Expr], str] = {
    exp.Insert: "InsertStmt",
    exp.Update: "UpdateStmt",
    exp.Delete: "DeleteStmt",
    exp.Merge: "MergeStmt",
}


def sqlglot_reading(tree: exp.Expr) -> tuple[frozenset[str], frozenset[Relation]]:
    """The statement kinds (PostgreSQL's node names) and relations in sqlglot's tree, the
    relations as PostgreSQL spells them (unquoted names folded to lower case); one walk."""
    kinds = {"SelectStmt"} if isinstance(tree, (exp.Query, exp.Values)) else set()
    out: set[Relation] = set()
    for node in tree.find_all(exp.Table, *_DML_KINDS):
        if not isinstance(node, exp.Table):
            kinds.add(_DML_KINDS[type(node)])
        elif isinstance(node.this, exp.Identifier):
            out.add(
                (
                    _name(node.args.get("catalog")),
                    _name(node.args.get("db")),
                    _name(node.this),
                )
            )
    return frozenset(kinds), frozenset(out)


def sqlglot_relations(tree: exp.Expr) -> frozenset[Relation]:
    """The relations named in sqlglot's tree (:func:`sqlglot_reading`)."""
    return sqlglot_reading(tree)[1]


# Texts whose readings agreed (a text's sqlglot tree is a function of the text): a client's
# statements repeat, and a repeat then costs one lookup. Refusals are not remembered, nor texts
# over dpsql.sql.prescan.MEMO_TEXT_MAX.
_AGREED: dict[str, None] = {}
_AGREED_MAX = 4096


def _differs(what: str, construct: str) -> FeatureNotSupported:
    return FeatureNotSupported(
        f"dpsql and PostgreSQL read this statement differently ({what}); "
        f"dpsql answers only what it reads as PostgreSQL does",
        hint=f"write it without {construct}",
    )


def check_same_reading(text: str, tree: exp.Expr) -> PgReading | None:
    """Refuse ``text`` unless PostgreSQL's reading of it (:func:`pg_reading`) and sqlglot's
    ``tree`` of it (one query, as parsed: before dpsql's own rewrites) agree on the number of
    statements, the statement kinds and the relations read (with catalog and schema).

    Returns PostgreSQL's reading for :func:`check_same_constants`, or None where ``text``
    passed both checks before (remembered: a repeat costs one lookup).

    Raises:
        SqlSyntaxError: PostgreSQL 15 refuses to parse ``text`` (42601, its words).
        FeatureNotSupported: they read it differently (0A000).
    """
    if text in _AGREED:
        return None
    pg = pg_reading(text)
    if pg.statements != 1:
        raise _differs(
            f"PostgreSQL reads {pg.statements} statements where dpsql reads one",
            "the quotes, comments or dollar quotes that hide a semicolon",
        )
    kinds, mine = sqlglot_reading(tree)
    if not (kinds <= pg.kinds and (pg.kinds - {"SelectStmt"}) <= kinds):
        raise _differs(
            "PostgreSQL reads another kind of statement: "
            + ", ".join(sorted(k.removesuffix("Stmt").upper() for k in pg.kinds)),
            "the quotes, comments or unusual characters around its keywords",
        )
    if mine != pg.relations:
        only_pg = sorted(".".join(p for p in r if p) for r in pg.relations - mine)
        only_mine = sorted(".".join(p for p in r if p) for r in mine - pg.relations)
        what = "tables PostgreSQL would read: " + (", ".join(only_pg) or "none more")
        if only_mine:
            what += "; tables dpsql read: " + ", ".join(only_mine)
        raise _differs(what, "the unusual quotes, escapes or characters near those table names")
    return pg


def _listed(facts: list[Fact]) -> str:
    shown = ", ".join(written(f) for f in facts[:3])
    return shown + (f" and {len(facts) - 3} more" if len(facts) > 3 else "") if facts else "none"


def check_same_constants(text: str, pg: PgReading | None, tree: exp.Expr) -> str | None:
    """Refuse ``text`` unless the SQL dpsql writes from ``tree`` (its final parse of the text:
    every statement dpsql sends is built from it) holds every constant PostgreSQL reads in
    ``text`` (``pg``), as dpsql.sql.pg_constants compares them; then remember ``text`` as
    agreed (with :func:`check_same_reading`'s checks). Returns that SQL (``tree`` as dpsql
    writes it: :attr:`dpsql.sql.parse.ParsedQuery.written`); nothing to do, None, where ``pg``
    is None (the text agreed before).

    Raises:
        FeatureNotSupported: a constant would reach PostgreSQL otherwise than written (0A000).
    """
    if pg is None:
        return None
    sent = tree.sql(POSTGRES)
    try:
        theirs = constants(json.loads(pg_parser.parse_sql_json(sent)).get("stmts", []))
    except pg_parser.ParseError:
        raise _differs(
            "dpsql would write it in a form PostgreSQL does not read",
            "the unusual constructs in it (write it more plainly)",
        ) from None
    only_mine, only_sent = differing(pg.constants(), theirs)
    if only_mine:  # (a constant only dpsql's SQL has: see dpsql.sql.pg_constants)
        raise FeatureNotSupported(
            "dpsql and PostgreSQL read a constant of this statement differently: dpsql would "
            f"send {_listed(only_sent)} where the statement has {_listed(only_mine)}; dpsql "
            "answers only what it reads as PostgreSQL does",
            hint=hint_for(only_mine + only_sent),
        )
    if not kept_text(text):
        return sent
    if len(_AGREED) >= _AGREED_MAX:
        _AGREED.clear()
    _AGREED[text] = None
    return sent
