"""A private query's group keys: their PostgreSQL types and their declared (public) values.

Both are read without touching private values: the types from a zero-row probe of the bounded
source, the values from the policy (``keys``) or a public key table (``keys_from``). Each is
memoized in one of the engine's memos (``Engine.caches.key_types``, ``Engine.caches.keys_from``);
the types per analyst view, statement text and catalog state of the tables read
(``EngineContext.catalog_token``: read with the plan's one-row-per-unit proof), so that a
column's new type (``ALTER TABLE ... ALTER COLUMN ... TYPE``) is probed again.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from sqlglot import exp

from dpsql.errors import DpsqlError, UnsupportedSql, UpstreamError
from dpsql.execute.backend import Rows, key_type_name, type_name
from dpsql.execute.prepared import PrivateQuery
from dpsql.sql.analysis import ROW_VALUE_KINDS, Analysis, decomposable
from dpsql.sql.nodes import POSTGRES
from dpsql.sql.rewrite.make_total import make_total
from dpsql.sql.rewrite.source_rows import source_select
from dpsql.sql.sources import table_name

if TYPE_CHECKING:
    from dpsql.execute.context import EngineContext


def group_types(engine: EngineContext, prepared: PrivateQuery, a: Analysis) -> tuple[str, ...]:
    """The keys' PostgreSQL types (with grouping sets, then the set number's: int4)."""
    set_type: tuple[str, ...] = ("int4",) if a.grouping_sets else ()
    if not a.group_keys:
        if a.where is not None and not prepared.param_count:
            key = ("where", prepared.scope, prepared.text, engine.catalog_token(a))
            if engine.caches.key_types.get(key) is None:
                _probe(engine, prepared, a, [exp.alias_(exp.Literal.number(1), "one")])
                engine.caches.key_types.remember(key, ())
        return set_type
    # keyed by the analyst's view, the text and the catalog's state of the tables (an ALTER
    # COLUMN ... TYPE since changes the token): never by the text alone
    key = ("keys", prepared.scope, prepared.text, engine.catalog_token(a))
    cached = engine.caches.key_types.get(key)
    if cached is not None:
        return tuple(cached) + set_type
    from dpsql.execute import shadows

    # PostgreSQL folds constants when planning the probe
    shadows.check(engine, prepared.text, prepared.tree, scope=prepared.scope)
    rows = _probe(engine, prepared, a, _key_cols(a))
    types = _key_types(engine, [c.type_oid for c in rows.columns])
    engine.caches.key_types.remember(key, types)
    return types + set_type


def _probe_sql(prepared: PrivateQuery, a: Analysis, cols: list[exp.Expr]) -> str:
    """:func:`_probe`'s statement."""
    q = source_select(a, "", *cols)
    if a.where is not None and not prepared.param_count:
        q = q.where(make_total(a.where, a.column))
    q = q.limit(0)  # a probe: reads no row
    if prepared.units:  # synthetic per-unit tables (dpsql.sql.per_unit)
        from dpsql.sql.per_unit import substitute

        q = substitute(q, prepared.units)  # type: ignore[assignment]
    return q.sql(POSTGRES)


def _key_cols(a: Analysis) -> list[exp.Expr]:
    return [exp.alias_(make_total(g.expr, a.column), f"g{i}") for i, g in enumerate(a.group_keys)]


def _value_args(a: Analysis) -> dict[str, exp.Expr]:
    """The quantile arguments of ``a`` by their SQL text (:func:`value_types`), and those of its
    ROW_VALUE_KINDS measures when its rows are ranked per unit (not decomposable, not row
    privacy: ``Analysis.row_value_types``)."""
    ranked = not a.private.row_privacy and not decomposable(a)
    args: dict[str, exp.Expr] = {}
    for m in a.measures:
        if m.arg is not None and (m.kind == "quantile" or (ranked and m.kind in ROW_VALUE_KINDS)):
            args.setdefault(m.arg_sql, m.arg)
    return args


def _value_cols(a: Analysis, args: dict[str, exp.Expr]) -> list[exp.Expr]:
    return [exp.alias_(make_total(e, a.column), f"v{i}") for i, e in enumerate(args.values())]


@dataclass(frozen=True)
class FirstProbe:
    """The zero-row probe a statement not probed before needs (its keys' types, its quantile
    arguments' types, or its WHERE's constants alone), as one statement (``sql``), sent by the
    plan in the round trip of its catalog read (:func:`dpsql.execute.planning.plan`), whose
    token keys what :meth:`store` remembers: :func:`group_types` and :func:`value_types` then
    find it, as if they had probed."""

    prepared: PrivateQuery
    a: Analysis
    sql: str
    args: tuple[str, ...]

    def store(self, engine: EngineContext, token: str, rows: Rows) -> None:
        prepared, a = self.prepared, self.a
        scope, text, memo = prepared.scope, prepared.text, engine.caches.key_types
        n = len(a.group_keys)
        oids = [c.type_oid for c in rows.columns]
        if n:
            memo.remember(("keys", scope, text, token), _key_types(engine, oids[:n]))
        elif a.where is not None and not prepared.param_count:
            memo.remember(("where", scope, text, token), ())
        if self.args:
            types = tuple((t, type_name(o)) for t, o in zip(self.args, oids[n:], strict=True))
            memo.remember(("values", scope, text, token, self.args), types)
        memo.remember(("probed", scope, text), True)


def first_probe(engine: EngineContext, prepared: PrivateQuery, a: Analysis) -> FirstProbe | None:
    """The :class:`FirstProbe` of a statement whose text was never probed (in this analyst's
    view), None when there is nothing to probe, when it was probed before (its types are
    memoized per catalog token: a changed catalog is probed again on its own), or when the
    statement fails the shadowing check the probe must pass first (refused later, where it was
    before)."""
    if engine.caches.key_types.get(("probed", prepared.scope, prepared.text)) is not None:
        return None
    _check_before_probe(engine, prepared, a)
    args = _value_args(a)
    cols = _key_cols(a) + _value_cols(a, args)
    if not cols:
        if a.where is None or prepared.param_count:
            return None
        cols = [exp.alias_(exp.Literal.number(1), "one")]
    from dpsql.execute import shadows

    try:  # PostgreSQL folds constants when planning the probe
        shadows.check(engine, prepared.text, prepared.tree, scope=prepared.scope)
    except DpsqlError:
        return None
    return FirstProbe(prepared, a, _probe_sql(prepared, a, cols), tuple(args))


def _check_before_probe(engine: EngineContext, prepared: PrivateQuery, a: Analysis) -> None:
    """The refusals a zero-row probe must not pre-empt, made before it is sent: a pattern match
    over a table with a nondeterministic collation (:func:`check_collation_searches`).
    PostgreSQL's planner evaluates ``name LIKE 'A%'`` on the column's most common values once
    the table has statistics (ANALYZE, or autovacuum at a moment of its own), so the probe
    failed upstream (0A000) or not by when autovacuum last ran: a Describe got an upstream
    error or columns, and a run sent the probe before refusing (flaky23)."""
    check_collation_searches(engine, prepared, a)


def _probe(
    engine: EngineContext, prepared: PrivateQuery, a: Analysis, cols: list[exp.Expr]
) -> Rows:
    """``SELECT cols FROM <the statement's tables> WHERE <its WHERE> LIMIT 0``: typed columns,
    and the statement's constants checked against its columns' types (``amount > 'abc'``,
    ``purchased_at > 'notadate'``: PostgreSQL coerces or folds them while it plans), reading no
    row, before any budget is reserved. A failure here says nothing of the private rows, so it
    is refused as such (nothing charged) instead of failing the charged query later. With
    parameters the WHERE is left out (their values are not known when this is memoized)."""
    _check_before_probe(engine, prepared, a)
    sql = _probe_sql(prepared, a, cols)
    try:
        return engine.backend.run(sql, private=True)
    except UpstreamError as e:
        if not e.sqlstate.startswith(("22", "42")):
            raise
        from dpsql.execute.constant_probe import constant_error

        own = constant_error(engine, prepared.tree)  # PostgreSQL's words, from constants alone
        if own is not None:
            raise own from None
        parsed = _parse_error(engine, prepared, sql, e.sqlstate)  # the catalog's, not the rows'
        if parsed is not None:
            raise parsed from None
        raise UpstreamError(
            "PostgreSQL refused this statement while planning it, before reading any row: "
            "nothing was charged",
            detail=f"error class {e.sqlstate}; the database's message is withheld",
            hint="check each constant against its column's type (a number compared with "
            "'abc', a date with 'notadate'), and the casts of constants",
            sqlstate=e.sqlstate,
        ) from None


def _parse_error(
    engine: EngineContext, prepared: PrivateQuery, sql: str, sqlstate: str
) -> DpsqlError | None:
    """The zero-row probe's failure (``sqlstate``'s class) told in PostgreSQL's words when
    PostgreSQL refuses the probe while parsing it (:func:`dpsql.execute.own_sql.parse_failure`:
    parse analysis reads the catalog, no row and no statistic): a type error such as
    ``upper(department)`` on an enum column (42883 ``function upper(dept) does not exist``,
    newcomer22 #19) is the catalog's, public to the analyst (``\\d visits`` shows the type).
    The analyst's own text refused the same way is PostgreSQL's answer to it; a probe refused
    while the analyst's text parses is dpsql's fault (XX000). None when the probe parses (it
    failed while planning: the planner reads the table's statistics, so its words stay
    withheld)."""
    from dpsql.execute import own_sql

    failure = own_sql.parse_failure(engine.backend, sql)
    if failure is None or failure.sqlstate[:2] != sqlstate[:2]:
        return None
    theirs = None if prepared.param_count else own_sql.parse_failure(engine.backend, prepared.text)
    if theirs is None and not prepared.param_count:
        return own_sql.own_failure(failure, prepared.fingerprint, charged="Nothing was charged")
    if theirs is not None and theirs.message == failure.message:
        failure = theirs
    return UpstreamError(
        failure.message,
        detail="PostgreSQL refused this statement while parsing it, before reading any row: "
        "nothing was charged",
        hint=failure.hint or None,
        sqlstate=failure.sqlstate,
    )


# pg_type.typtype / typcategory of a type psycopg doesn't know -> the name key_texts refuses
_KINDS = {"c": "record", "p": "record", "r": "range", "m": "range"}


def _key_types(engine: EngineContext, oids: list[int]) -> tuple[str, ...]:
    """Key type names (:func:`key_type_name`); types psycopg doesn't know (enums, domains,
    extension types, composite types, arrays of them) are read from the catalog: composite,
    pseudo, range and array types are named so that :func:`key_texts.check_selectable` refuses
    them, the others ``other``: released by their text, and hashed as their text when groups
    are ranked (named ``text`` they were hashed by ``hashtextextended``, which an enum or a
    domain over a number does not take: MIN/MEDIAN by an enum column failed upstream, charged,
    newcomer22 #29)."""
    names = [key_type_name(o) for o in oids]
    unknown = sorted({o for o, n in zip(oids, names, strict=True) if n is None})
    kinds: dict[int, str] = {}
    if unknown:
        got = engine.backend.run(
            "SELECT oid::int8, typtype::text, typcategory::text FROM pg_catalog.pg_type "
            "WHERE oid = ANY(%s::oid[])",
            (unknown,),
            private=False,
        ).rows
        for oid, typtype, category in got:
            kind = "array" if category == "A" else _KINDS.get(str(typtype), "other")
            kinds[int(oid)] = kind
    return tuple(
        n if n is not None else kinds.get(o, "other") for o, n in zip(oids, names, strict=True)
    )


def value_types(engine: EngineContext, prepared: PrivateQuery, a: Analysis) -> dict[str, str]:
    """The PostgreSQL type of each quantile argument of ``a`` (by its SQL text), from a zero-row
    probe of the bounded source (reads no row), memoized per statement and catalog state with the
    key types."""
    args = _value_args(a)
    if not args:
        return {}
    key = ("values", prepared.scope, prepared.text, engine.catalog_token(a), tuple(args))
    cached = engine.caches.key_types.get(key)
    if cached is not None:
        return dict(cached)
    rows = _probe(engine, prepared, a, _value_cols(a, args))
    types = {text: type_name(c.type_oid) for text, c in zip(args, rows.columns, strict=True)}
    engine.caches.key_types.remember(key, tuple(types.items()))
    return types


def unit_type(engine: EngineContext, prepared: PrivateQuery, a: Analysis) -> str:
    """The privacy unit's PostgreSQL type name, from a zero-row probe of the bounded source
    (reads no row): a built-in type's name (:func:`key_type_name`; an array's ends in ``[]``),
    ``""`` for any other (a domain, an enum, an extension's type) and with row privacy (no
    unit). The keyed hashes hash a unit of a type in
    :data:`~dpsql.sql.rewrite.keyed_hash.HASHED_TYPES` as a value (``Analysis.unit_type``), any
    other as text.

    Memoized per statement text and catalog state of the tables read, and per probe text: the
    probe names the statement's source alone (no WHERE, no measure), so a new statement over the
    same tables and joins reuses the answer of the same probe instead of sending it again."""
    if a.private.row_privacy or a.unique_unit:
        return ""
    token = engine.catalog_token(a)
    key = ("unit", prepared.scope, prepared.text, token)
    cached = engine.caches.key_types.get(key)
    if cached is not None:
        return str(cached[0])
    unit = exp.column(a.private.privacy_unit, table=a.alias, quoted=True)
    q = source_select(a, "", exp.alias_(unit, "u")).limit(0)  # a type probe: reads no row
    if prepared.units:  # synthetic per-unit tables (dpsql.sql.per_unit)
        from dpsql.sql.per_unit import substitute

        q = substitute(q, prepared.units)  # type: ignore[assignment]
    text = q.sql(POSTGRES)
    probe_key = ("unit-probe", prepared.scope, text, token)
    cached = engine.caches.key_types.get(probe_key)
    if cached is None:
        rows = engine.backend.run(text, private=True)
        cached = (key_type_name(rows.columns[0].type_oid) or "",)
        engine.caches.key_types.remember(probe_key, cached)
    engine.caches.key_types.remember(key, cached)
    return str(cached[0])


def declared_keys(engine: EngineContext, a: Analysis) -> list[tuple[str | None, ...]] | None:
    """Each group key's public domain (:meth:`GroupKey.domain`), or None when the query selects
    its keys from the data."""
    if not a.group_keys:
        return []
    if a.needs_selection:
        return None
    out = []
    for g in a.group_keys:
        if g.keys is not None:
            out.append(g.domain())
        elif g.constant:
            out.append(constant_key(engine, make_total(g.expr, a.column)))
        else:
            assert g.keys_from is not None
            out.append(g.domain(resolve_keys_from(engine, g.keys_from)))
    return out


def constant_key(engine: EngineContext, expr: exp.Expr) -> tuple[str | None]:
    """The text of a constant key as the private query prints it (``CAST(key AS text)``): read
    from PostgreSQL with no FROM clause (the expression reads no table, no parameter, no clock:
    :func:`dpsql.sql.constants.is_public_constant`), memoized with the ``keys_from`` values."""
    sql = exp.select(exp.cast(expr.copy(), "text")).sql(POSTGRES)
    hit = engine.caches.keys_from.get(("constant", sql))
    if hit is not None:
        return (hit[0],)
    rows = engine.backend.run(sql, private=False)
    text = None if rows.rows[0][0] is None else str(rows.rows[0][0])
    engine.caches.keys_from.remember(("constant", sql), (text,))
    return (text,)


def resolve_keys_from(engine: EngineContext, ref: str) -> tuple[str, ...]:
    """The distinct non-null values (as text, sorted) of the public column ``ref`` (table.col)."""
    hit = engine.caches.keys_from.get(ref)
    if hit is not None:
        return tuple(hit)
    parts = ref.split(".")
    col = parts[-1]
    table = ".".join(parts[:-1])
    q = (
        exp.select(exp.cast(exp.column(col, quoted=True), "text"))
        .distinct()
        .from_(exp.to_table(table))
        .where(exp.column(col, quoted=True).is_(exp.null()).not_())
    )
    rows = engine.backend.run(q.sql(POSTGRES), private=False)
    keys = tuple(sorted(str(r[0]) for r in rows.rows))
    engine.caches.keys_from.remember(ref, keys)
    return keys


KEYS_FROM_INLINE_MAX = 1000
"""A ``keys_from`` domain of at most this many keys (after the WHERE clause narrows it) is written
into the statement's analysis as its keys (:func:`inline_key_tables`); a longer one stays read at
release time (its rows are not filtered upstream, and G is not narrowed by it)."""


def inline_key_tables(
    engine: EngineContext, a: Analysis, text: str, tree: exp.Expr | None, scope: str
) -> Analysis:
    """``a`` with each ``keys_from`` key's public values (narrowed by the WHERE clause) as its
    ``keys``, as if the policy listed them (``keys_from`` is kept: the table is checked again
    before the statement runs). The key table is public, so its values and their number are
    too: rows outside them are filtered upstream, G is at most their combinations
    (:attr:`Analysis.max_groups`), and with few of them an ``auto`` G is set, not chosen
    (:func:`dpsql.sql.auto_bounds.declared_groups`). The key table passes the statement's
    shadowing check (a view of protected data is refused, 42501) before it is read. Not for a
    statement that selects its groups from the data (some key without public values): its
    ``keys_from`` keys are released above the threshold as before."""
    todo = [i for i, g in enumerate(a.group_keys) if g.keys is None and g.keys_from is not None]
    if not todo or a.needs_selection:
        return a
    from dataclasses import replace

    from dpsql.execute import shadows

    tables = tuple(str(a.group_keys[i].keys_from).rsplit(".", 1)[0] for i in todo)
    shadows.check(engine, text, tree, tables, scope)
    keys = list(a.group_keys)
    for i in todo:
        g = keys[i]
        domain = g.domain(resolve_keys_from(engine, str(g.keys_from)))
        if len(domain) <= KEYS_FROM_INLINE_MAX:
            keys[i] = replace(g, keys=tuple(k for k in domain if k is not None), narrow=None)
    return replace(a, group_keys=tuple(keys))


NONDETERMINISTIC_SQL = """WITH RECURSIVE cols AS (
  SELECT a.atttypid AS typ, a.attcollation AS coll FROM pg_catalog.pg_attribute a
  WHERE a.attrelid = ANY (ARRAY[{tables}]::pg_catalog.oid[]) AND a.attnum > 0
    AND NOT a.attisdropped
), types(typ) AS (
  SELECT typ FROM cols
  UNION
  SELECT t.typbasetype FROM pg_catalog.pg_type t JOIN types ON t.oid = types.typ
  WHERE t.typbasetype <> 0
)
SELECT COALESCE((SELECT pg_catalog.bool_or(NOT COALESCE(c.collisdeterministic, true))
  FROM cols LEFT JOIN pg_catalog.pg_collation c ON c.oid = cols.coll), false)
  OR EXISTS (SELECT 1 FROM types JOIN pg_catalog.pg_type t ON t.oid = types.typ
    WHERE t.typname = 'citext')"""
"""Whether a column of the given tables has a nondeterministic collation (case- or accent-
insensitive) or the ``citext`` type, also under a domain (``CREATE DOMAIN email AS citext``:
the column's type is the domain, its base types are followed): equal texts under it print
differently (``'a' = 'A'``)."""

TEXT_TYPES = frozenset({"text", "varchar", "bpchar", "name"})


def nondeterministic_text(engine: EngineContext, a: Analysis, also: tuple[str, ...] = ()) -> bool:
    """Whether a table ``a`` reads has a column with a nondeterministic collation (read from the
    catalog, memoized per catalog state of its tables), or one of the tables ``also`` names (the
    public tables of its IN / EXISTS subqueries: read each time, their catalog state is not in
    the key)."""
    from dpsql.execute.unique_units import tables

    names = tables(a)
    key = ("nondeterministic", names, engine.catalog_token(a))
    hit = engine.caches.key_types.get(key)
    if hit is None:
        hit = _nondeterministic(engine, names)
        engine.caches.key_types.remember(key, hit)
    if hit:
        return True
    more = tuple(t for t in also if t not in names)
    return bool(more) and _nondeterministic(engine, more)


def _nondeterministic(engine: EngineContext, names: tuple[str, ...]) -> bool:
    from psycopg import sql as pgsql

    oids = pgsql.SQL(", ").join(
        pgsql.SQL("pg_catalog.to_regclass({})::pg_catalog.oid").format(
            pgsql.Literal(".".join('"' + p.replace('"', '""') + '"' for p in t.split(".", 1)))
        )
        for t in names
    )
    q = pgsql.SQL(NONDETERMINISTIC_SQL).format(tables=oids).as_string(None)
    rows = engine.backend.run(q, private=False).rows
    return bool(rows and rows[0][0])


# PostgreSQL (before 18) refuses these over a nondeterministic collation (0A000 "nondeterministic
# collations are not supported for LIKE / substring searches / regular expressions") when it
# evaluates them on a row, not when it plans them
_COLLATION_SEARCHES = tuple(
    getattr(exp, name)
    for name in (
        "Like",
        "ILike",
        "SimilarTo",
        "RegexpLike",
        "RegexpILike",
        "RegexpReplace",
        "RegexpExtract",
        "RegexpSplit",
        "StrPosition",
        "Replace",
        "SplitPart",
        "StartsWith",
    )  # fmt: skip
    if hasattr(exp, name)
)


def check_collation_searches(engine: EngineContext, prepared: PrivateQuery, a: Analysis) -> None:
    """A pattern match or substring search (LIKE, ILIKE, SIMILAR TO, ~, strpos, position,
    replace, split_part, starts_with) over a table with a column of a nondeterministic collation
    is refused before any charge (review23): PostgreSQL raises 0A000 for it only when a row
    reaches it, so ``WHERE amount > 900 AND name LIKE 'A%'`` answered on one database and failed
    on its neighbour with one more person (amount 950): a noiseless bit about the rows, and the
    failure (class 0A) was even refunded. Read from the catalog (memoized), only when the
    statement has such an operator. The tables are the statement's and its subqueries' (review24:
    ``region IN (SELECT r.code FROM regions r WHERE r.name LIKE 'N%')`` over a public table
    whose name is case-insensitive runs the subquery only when a private row reaches it: it
    failed on the neighbour with one more person whose row passes the rest of the filter)."""
    node = next(prepared.tree.find_all(*_COLLATION_SEARCHES), None)
    if node is None:
        return
    also = tuple(sorted({table_name(t) for t in prepared.tree.find_all(exp.Table) if t.name}))
    if not nondeterministic_text(engine, a, also):
        return
    raise UnsupportedSql(
        f"{node.sql('postgres')}: pattern matching and substring searches are not supported over "
        "a table with a column of a nondeterministic (case- or accent-insensitive) collation "
        "(PostgreSQL refuses them row by row, so whether the statement fails would depend on "
        "the rows)",
        hint="compare with = or IN, or give the table's text columns a deterministic collation "
        '(ALTER TABLE ... ALTER COLUMN ... TYPE text COLLATE "default")',
    )
