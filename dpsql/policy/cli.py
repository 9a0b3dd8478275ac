"""``dpsql init``: write a starting policy from an existing database (registered into dpsql.cli)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpsql.errors import (
    ConnectionFailure,
    DpsqlError,
    DuplicateFile,
    ExternalSystemError,
    InvalidParameter,
    InvalidSchemaName,
    IoError,
)
from dpsql.errors.upstream import first_line

if TYPE_CHECKING:
    from dpsql.policy.init import TableInfo


def register(sub: Any) -> None:
    p = sub.add_parser(
        "init",
        help="write a starting policy from the database's catalog (every guess marked REVIEW)",
    )
    p.add_argument("--upstream", default=os.environ.get("DPSQL_UPSTREAM"),
                   help="DSN of the PostgreSQL holding the data (default $DPSQL_UPSTREAM)")  # fmt: skip
    p.add_argument("--schema", action="append", help="schemas to read (default public; repeat)")
    p.add_argument("--dataset", help="the dataset's name (default: the database's)")
    p.add_argument("--output", "-o", default="policy.yaml", help="file to write (- : stdout)")
    p.add_argument("--force", action="store_true", help="overwrite an existing file")
    p.set_defaults(func=cmd_init)


def cmd_init(args: argparse.Namespace) -> int:
    from dpsql.policy.init import write_policy

    if not args.upstream:
        raise InvalidParameter(
            "no database given: dpsql init reads the tables from a PostgreSQL database",
            hint="dpsql init --upstream 'postgresql://user@host/dbname' (or set DPSQL_UPSTREAM)",
        )
    out = Path(args.output)
    if args.output != "-" and out.exists() and not args.force:
        raise DuplicateFile(
            f"{out} exists: dpsql init does not overwrite a policy",
            hint="choose another --output, or add --force to overwrite it",
        )
    if args.output != "-" and not out.parent.is_dir():
        raise IoError(
            f"could not write {out}: its directory {out.parent} does not exist",
            hint="choose an --output in an existing directory you can write to, or - for stdout",
        )
    dataset = args.dataset or _dbname(args.upstream) or "default"
    schemas = tuple(args.schema or ["public"])
    tables = _read(args.upstream, schemas)
    if not tables:
        raise InvalidSchemaName(
            f"no table or view in schema {', '.join(schemas)} of that database: nothing to "
            "write a policy for",
            hint="name the schemas holding the data with --schema (repeat it for several), or "
            "check the database name in --upstream",
        )
    text = write_policy(tables, dataset)
    if args.output == "-":
        sys.stdout.write(text)
        return 0
    try:
        out.write_text(text)
    except OSError as e:
        raise IoError(
            f"could not write {out}: {e.strerror or e}",
            hint="choose an --output in an existing directory you can write to, or - for stdout",
        ) from None
    print(f"wrote {out}: review every line marked REVIEW, then `dpsql check --policy {out} "
          f"--upstream ...` (docs/policy.md)")  # fmt: skip
    return 0


def _dbname(dsn: str) -> str | None:
    """The database name of a connection string; refused (22023) when it is not one."""
    import psycopg

    try:
        name = psycopg.conninfo.conninfo_to_dict(dsn).get("dbname")
    except psycopg.ProgrammingError as e:
        raise InvalidParameter(
            "--upstream is not a connection string PostgreSQL understands",
            detail=first_line(e),
            hint="give a URI (postgresql://user@host:5432/dbname) or key=value pairs "
            "(host=... dbname=... user=...)",
        ) from None
    return str(name) if name else None


def _read(dsn: str, schemas: tuple[str, ...]) -> list[TableInfo]:
    """The catalog's tables; a failure to connect or to read it as a refusal with its SQLSTATE
    (the cause in DETAIL: psycopg's first line, which never holds the password)."""
    import psycopg

    from dpsql.policy.init import read_catalog

    try:
        return read_catalog(dsn, schemas)
    except psycopg.OperationalError as e:
        if e.sqlstate is None or e.sqlstate.startswith("08"):
            raise ConnectionFailure(
                "could not connect to the database given by --upstream",
                detail=first_line(e),
                hint="check its host, port, database name and credentials (psql with the same "
                "connection string should connect), then run dpsql init again",
            ) from None
        raise _upstream(e) from None
    except psycopg.Error as e:
        raise _upstream(e) from None


def _upstream(e: BaseException) -> DpsqlError:
    """A PostgreSQL error while reading the catalog once connected (e.g. 42501 no privilege),
    with PostgreSQL's own SQLSTATE and message (a refused connection -- no such database, a
    wrong password -- is 08006 above: the driver reports it without a SQLSTATE)."""
    import psycopg

    state = getattr(e, "sqlstate", None) or "58000"
    primary = e.diag.message_primary if isinstance(e, psycopg.Error) else None
    return ExternalSystemError(
        f"could not read the catalog of the database given by --upstream: "
        f"{primary or first_line(e)}",
        hint="connect as a user that may read the catalog of those schemas, to an existing "
        "database",
        sqlstate=state,
    )
