"""Superset's own connection code path against dpsql (run with a Python that has apache-superset).

Usage: python superset_client.py HOST PORT DBNAME WORKDIR

Builds a throwaway Superset app (SQLite metadata in WORKDIR), registers dpsql as a PostgreSQL
database with ``-c dpsql.epsilon=0.5`` in its engine parameters (Superset's "Extra" field), then
runs what Superset runs: the connection test, schema/table/column listing through its
PostgresEngineSpec, a dataset's column discovery (``SELECT * ... LIMIT 0``) and SQL Lab's
execution path (``execute_sql_statements``: ``SELECT pg_backend_pid()`` for cancelling, then the
query). Prints one JSON object per step.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid


def main() -> None:
    host, port, dbname, workdir = sys.argv[1:5]
    cfg = os.path.join(workdir, "superset_config.py")
    with open(cfg, "w") as f:
        f.write(
            'SECRET_KEY = "dpsql-compat-' + uuid.uuid4().hex + '"\n'
            f'SQLALCHEMY_DATABASE_URI = "sqlite:///{workdir}/superset.db"\n'
            'FILTER_STATE_CACHE_CONFIG = {"CACHE_TYPE": "SimpleCache"}\n'
            'EXPLORE_FORM_DATA_CACHE_CONFIG = {"CACHE_TYPE": "SimpleCache"}\n'
            'CACHE_CONFIG = {"CACHE_TYPE": "NullCache"}\n'
            'DATA_CACHE_CONFIG = {"CACHE_TYPE": "NullCache"}\n'
            "SQLLAB_CTAS_NO_LIMIT = True\n"
        )
    os.environ["SUPERSET_CONFIG_PATH"] = cfg
    from superset.app import create_app

    app = create_app()
    with app.app_context():
        run(host, port, dbname)


def emit(step: str, **kw: object) -> None:
    print(json.dumps({"step": step, **kw}, default=str), flush=True)


def run(host: str, port: str, dbname: str) -> None:
    from superset.extensions import db
    from superset.models.core import Database
    from superset.models.sql_lab import Query
    from superset.sql_lab import execute_sql_statements
    from superset.utils.core import QueryStatus

    if not _has_tables(db):  # Superset's metadata schema, as `superset db upgrade` makes it
        import superset
        from flask_migrate import upgrade

        upgrade(directory=os.path.join(os.path.dirname(superset.__file__), "migrations"))
    uri = f"postgresql+psycopg2://analyst:analyst@{host}:{port}/{dbname}"
    extra = {"engine_params": {"connect_args": {"options": "-c dpsql.epsilon=0.5"}}}
    database = Database(database_name=f"dpsql-{uuid.uuid4().hex[:6]}", sqlalchemy_uri=uri,
                        expose_in_sqllab=True, extra=json.dumps(extra))  # fmt: skip
    db.session.add(database)
    db.session.commit()

    # the connection test and the dataset editor's listings (SQLAlchemy inspector + engine spec)
    with database.get_sqla_engine() as engine, engine.connect() as conn:
        emit("connect", ok=True, epsilon=conn.exec_driver_sql("SHOW dpsql.epsilon").scalar())
    with database.get_inspector() as insp:
        spec = database.db_engine_spec
        schemas = sorted(spec.get_schema_names(insp))
        tables = sorted(t for t, _ in spec.get_table_names(database, insp, "public")
                        ) if _pairs(spec, database, insp) else sorted(
            spec.get_table_names(database, insp, "public"))  # fmt: skip
        columns = [c["column_name"] if "column_name" in c else c["name"]
                   for c in insp.get_columns("purchases", "public")]  # fmt: skip
        emit("inspect", schemas=schemas, tables=tables, columns=columns)
    with database.get_sqla_engine() as engine, engine.connect() as conn:
        res = conn.exec_driver_sql("SELECT * FROM public.purchases LIMIT 0")  # dataset columns
        emit("columns", names=list(res.keys()), rows=len(res.fetchall()))

    # SQL Lab: the Query row, then Superset's own execution path (cancel id first)
    for sql in ("SELECT category, COUNT(*) AS n FROM purchases GROUP BY category",
                "SELECT * FROM purchases"):  # fmt: skip
        query = Query(client_id=uuid.uuid4().hex[:10], database=database, sql=sql,
                      schema="public", select_as_cta=False, limit=1000,
                      status=QueryStatus.PENDING, start_time=time.time() * 1000)  # fmt: skip
        db.session.add(query)
        db.session.commit()
        try:
            out = execute_sql_statements(query.id, sql, True, False, None, False, None)
            db.session.refresh(query)
            emit("sqllab", sql=sql, ok=True, status=str(query.status),
                 cancel_id=query.extra.get("cancel_query"), data=(out or {}).get("data"),
                 error=query.error_message)  # fmt: skip
        except Exception as e:  # SQL Lab wraps the database's error
            db.session.rollback()
            emit("sqllab", sql=sql, ok=False, error=str(e)[:500])
    cancel(database)


# long enough to be stopped mid-way (seconds on the demo data: each whale pairs 400 x 400 rows)
SLOW = "SELECT COUNT(*) FROM purchases a JOIN purchases b ON a.user_id = b.user_id"


def cancel(database: object) -> None:
    """SQL Lab's Stop: a statement runs on one connection, whose pid was read as SQL Lab reads
    it (get_cancel_query_id), and PostgresEngineSpec.cancel_query runs from another connection
    (``SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE pid='...'``). Emits what
    cancel_query returned, the running statement's state in pg_stat_activity when Stop was
    pressed, and how the statement ended: ``answered`` means Stop did nothing."""
    import threading

    from superset.models.sql_lab import Query

    spec = database.db_engine_spec  # type: ignore[attr-defined]
    with database.get_raw_connection() as lab, database.get_raw_connection() as stop:  # type: ignore[attr-defined]
        lab_cur = lab.cursor()
        pid = spec.get_cancel_query_id(lab_cur, Query())
        ended: dict[str, str] = {}

        def run() -> None:
            try:
                lab_cur.execute(SLOW)
                lab_cur.fetchall()
                ended["outcome"] = "answered"
            except Exception as e:  # the statement stopped (or failed)
                ended["outcome"] = f"{type(e).__name__}: {str(e)[:300]}"

        t = threading.Thread(target=run)
        t.start()
        cur = stop.cursor()
        state, deadline = None, time.monotonic() + 60  # (a guard, not a measurement)
        while time.monotonic() < deadline and state != "active":
            cur.execute("SELECT state FROM pg_stat_activity WHERE pid = %s", (pid,))
            row = cur.fetchone()
            state = row[0] if row else None
            if state != "active":
                time.sleep(0.05)
        done = spec.cancel_query(cur, Query(), str(pid))
        t.join(300)
        emit("cancel", pid=pid, ok=done, seen=state, outcome=ended.get("outcome", "running"))


def _has_tables(db: object) -> bool:
    import sqlalchemy as sa

    return "dbs" in sa.inspect(db.engine).get_table_names()  # type: ignore[attr-defined]


def _pairs(spec: object, database: object, insp: object) -> bool:
    """Superset 4+ returns (table, schema) pairs from get_table_names; older ones names."""
    got = list(spec.get_table_names(database, insp, "public"))  # type: ignore[attr-defined]
    return bool(got) and isinstance(got[0], tuple)


if __name__ == "__main__":
    main()
