"""``dpsql init``: write a starting policy from an existing database (registered into dpsql.cli)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import Any

from dpsql.errors import InvalidParameter


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
    import psycopg

    from dpsql.policy.init import read_catalog, write_policy

    if not args.upstream:
        raise InvalidParameter("no database given", hint="dpsql init --upstream DSN")
    out = Path(args.output)
    if args.output != "-" and out.exists() and not args.force:
        raise InvalidParameter(f"{out} exists", hint="choose another --output, or --force")
    dataset = args.dataset or str(psycopg.conninfo.conninfo_to_dict(args.upstream).get("dbname")
                                  or "default")  # fmt: skip
    text = write_policy(read_catalog(args.upstream, tuple(args.schema or ["public"])), dataset)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        out.write_text(text)
        print(f"wrote {out}: review every line marked REVIEW, then `dpsql check --policy {out} "
              f"--upstream ...` (docs/policy.md)")  # fmt: skip
    return 0
