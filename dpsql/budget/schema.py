"""The ledger's tables, created and migrated in place, versioned.

``MIGRATIONS[i]`` brings a schema from version ``i`` to ``i + 1``; each runs in one transaction under
an advisory lock, so several dpsql processes starting together migrate once. A database whose
version is newer than this code is refused rather than written to.

Tables (all in the ledger schema, ``dpsql`` by default):

- ``budget``: one row per budget and period: the running totals spent (exact fractions as text,
  ``p/q``; ``renyi_spent`` sums each release's Renyi divergence at the row's ``renyi_order``),
  the filter's order and explicit-delta share (fixed by the period's first release), admin
  grants, a ``generation`` bumped by each reset. Reservations lock these rows.
- ``release``: the append-only audit log of every release (who, when, fingerprint, cost, state).
  Only ``reserved -> committed | refunded`` may change; deletes and truncation are refused.
- ``answer``: stored noisy answers for free repeats (never the true values).
- ``release_failure``: append-only, the charged releases whose query failed (and its SQLSTATE).
- ``admin_audit``: append-only record of every grant and reset.
"""

from __future__ import annotations

import psycopg
from psycopg import sql

from dpsql.errors import InternalError

_V1 = (
    """CREATE TABLE {s}.budget (
        dataset text NOT NULL,
        kind text NOT NULL CHECK (kind IN ('analyst', 'dataset')),
        name text NOT NULL,
        period_start timestamptz NOT NULL,
        epsilon_spent text NOT NULL DEFAULT '0',
        delta_spent text NOT NULL DEFAULT '0',
        rho_spent text NOT NULL DEFAULT '0',
        epsilon_granted text NOT NULL DEFAULT '0',
        delta_granted text NOT NULL DEFAULT '0',
        releases bigint NOT NULL DEFAULT 0,
        generation integer NOT NULL DEFAULT 0,
        updated_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (dataset, kind, name, period_start)
    )""",
    """CREATE TABLE {s}.release (
        id bigserial PRIMARY KEY,
        dataset text NOT NULL,
        analyst text NOT NULL,
        fingerprint text NOT NULL,
        mechanism text NOT NULL DEFAULT '',
        epsilon text NOT NULL,
        delta text NOT NULL,
        rho text NOT NULL,
        delta_for_rho text NOT NULL DEFAULT '0',
        state text NOT NULL CHECK (state IN ('reserved', 'committed', 'refunded', 'repeat')),
        charged jsonb NOT NULL DEFAULT '[]',
        created_at timestamptz NOT NULL DEFAULT clock_timestamp(),
        settled_at timestamptz
    )""",
    "CREATE INDEX release_by_analyst ON {s}.release (dataset, analyst, id)",
    """CREATE TABLE {s}.answer (
        dataset text NOT NULL,
        scope text NOT NULL,
        cache_key text NOT NULL,
        payload bytea NOT NULL,
        release_id bigint NOT NULL REFERENCES {s}.release (id),
        created_at timestamptz NOT NULL DEFAULT now(),
        PRIMARY KEY (dataset, scope, cache_key)
    )""",
    """CREATE TABLE {s}.admin_audit (
        id bigserial PRIMARY KEY,
        at timestamptz NOT NULL DEFAULT clock_timestamp(),
        actor text NOT NULL,
        action text NOT NULL,
        dataset text NOT NULL,
        kind text NOT NULL,
        name text NOT NULL,
        period_start timestamptz NOT NULL,
        detail jsonb NOT NULL
    )""",
    """CREATE FUNCTION {s}.refuse_change() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        RAISE EXCEPTION 'the dpsql ledger table % is append-only', TG_TABLE_NAME
            USING ERRCODE = '42501';
    END $$""",
    """CREATE FUNCTION {s}.guard_release() RETURNS trigger LANGUAGE plpgsql AS $$
    BEGIN
        IF OLD.state <> 'reserved' OR NEW.state NOT IN ('committed', 'refunded')
           OR (to_jsonb(NEW) - 'state' - 'settled_at') <> (to_jsonb(OLD) - 'state' - 'settled_at')
        THEN
            RAISE EXCEPTION 'dpsql release % can only go from reserved to committed or refunded',
                OLD.id USING ERRCODE = '42501';
        END IF;
        RETURN NEW;
    END $$""",
    """CREATE TRIGGER release_update BEFORE UPDATE ON {s}.release
        FOR EACH ROW EXECUTE FUNCTION {s}.guard_release()""",
    """CREATE TRIGGER release_delete BEFORE DELETE ON {s}.release
        FOR EACH ROW EXECUTE FUNCTION {s}.refuse_change()""",
    """CREATE TRIGGER release_truncate BEFORE TRUNCATE ON {s}.release
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.refuse_change()""",
    """CREATE TRIGGER audit_change BEFORE UPDATE OR DELETE ON {s}.admin_audit
        FOR EACH ROW EXECUTE FUNCTION {s}.refuse_change()""",
    """CREATE TRIGGER audit_truncate BEFORE TRUNCATE ON {s}.admin_audit
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.refuse_change()""",
)

# Analysts never read the ledger directly (only through dpsql's views): no rights for PUBLIC.
_V2 = (
    "REVOKE ALL ON SCHEMA {s} FROM PUBLIC",
    "REVOKE ALL ON ALL TABLES IN SCHEMA {s} FROM PUBLIC",
    "REVOKE ALL ON ALL SEQUENCES IN SCHEMA {s} FROM PUBLIC",
    "REVOKE ALL ON ALL FUNCTIONS IN SCHEMA {s} FROM PUBLIC",
)

# The privacy filter (dpsql.budget.filter): each budget row keeps the summed Renyi divergences at
# its order, and the order and explicit-delta share fixed by its first release. Rows from before
# keep renyi_spent NULL: read as sum epsilon + order * sum rho, an upper bound.
_V3 = (
    "ALTER TABLE {s}.budget ADD COLUMN renyi_spent text, ADD COLUMN renyi_order text,"
    " ADD COLUMN delta_share text",
    "ALTER TABLE {s}.budget ALTER COLUMN renyi_spent SET DEFAULT '0'",
)

# The statement's text on each release, so dpsql.history shows an analyst their own statements
# (the fingerprint alone does not say what was asked). Releases from before have ''.
_V4 = ("ALTER TABLE {s}.release ADD COLUMN statement text NOT NULL DEFAULT ''",)

# A charged release whose query then failed (a data error, a timeout, a cancel: charged because
# whether it fails may depend on the private rows) is committed like an answered one; this
# append-only table says which failed, and how (its SQLSTATE), so dpsql.history tells them apart.
# Releases from before have no row here and are not known either way.
_V5 = (
    """CREATE TABLE {s}.release_failure (
        release_id bigint PRIMARY KEY REFERENCES {s}.release (id),
        sqlstate text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT clock_timestamp()
    )""",
    "REVOKE ALL ON {s}.release_failure FROM PUBLIC",
    """CREATE TRIGGER release_failure_change BEFORE UPDATE OR DELETE ON {s}.release_failure
        FOR EACH ROW EXECUTE FUNCTION {s}.refuse_change()""",
    """CREATE TRIGGER release_failure_truncate BEFORE TRUNCATE ON {s}.release_failure
        FOR EACH STATEMENT EXECUTE FUNCTION {s}.refuse_change()""",
)

# More Renyi orders beside a period's main one (dpsql.budget.filter.extra_orders): renyi_order
# holds the main order, then the others, space-separated ('547/500 2/1 4/1 ...'); a row with one
# order (every row from before) keeps it alone. A dpsql older than this would misread the new
# rows, so the version says so (it refuses a newer ledger).
_V6 = (
    "COMMENT ON COLUMN {s}.budget.renyi_order IS 'the Renyi order of the period''s filter, then "
    "its more orders (space-separated fractions); renyi_spent is at the first'",
)

MIGRATIONS: tuple[tuple[str, ...], ...] = (_V1, _V2, _V3, _V4, _V5, _V6)
VERSION = len(MIGRATIONS)


def _q(text: str, schema: str) -> sql.Composed:
    return sql.SQL(text).format(s=sql.Identifier(schema))


def current_version(conn: psycopg.Connection, schema: str) -> int:
    """The applied version, 0 when the ledger schema does not exist yet."""
    row = conn.execute("SELECT to_regclass(%s)", [f'"{schema}".schema_version']).fetchone()
    if row is None or row[0] is None:
        return 0
    got = conn.execute(_q("SELECT coalesce(max(version), 0) FROM {s}.schema_version", schema))
    return int(got.fetchone()[0])  # type: ignore[index]


def migrate(conn: psycopg.Connection, schema: str) -> int:
    """Create or upgrade the ledger schema; returns the version now in place.

    Raises:
        InternalError: the database holds a newer ledger version than this dpsql knows.
    """
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [f"dpsql.ledger:{schema}"])
        have = current_version(conn, schema)
        if have > VERSION:
            raise InternalError(
                f"the ledger schema {schema!r} is at version {have}, newer than this dpsql "
                f"({VERSION})",
                hint="upgrade dpsql on this host, or point it at another ledger schema",
            )
        if have == 0:
            exists = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", [schema])
            if exists.fetchone() is None:  # made by an admin for the ledger role: no CREATE needed
                conn.execute(_q("CREATE SCHEMA {s}", schema))
            conn.execute(
                _q(
                    "CREATE TABLE {s}.schema_version (version integer PRIMARY KEY, "
                    "applied_at timestamptz NOT NULL DEFAULT now())",
                    schema,
                )
            )
        for version in range(have, VERSION):
            for statement in MIGRATIONS[version]:
                conn.execute(_q(statement, schema))
            conn.execute(
                _q("INSERT INTO {s}.schema_version (version) VALUES (%s)", schema), [version + 1]
            )
    return VERSION
