"""Every refusal of the red-team corpus names only what its statement says (dpsql/sql/names.py):
no sqlglot function or class name (``str_to_date()``, ``CurrentTimestamp``) in any message."""

from __future__ import annotations

from pathlib import Path

import yaml

from dpsql.engine import Engine
from dpsql.errors import DpsqlError
from tests.unit.sql.test_refusal_names import names_leaked

CORPUS = yaml.safe_load((Path(__file__).parent / "corpus.yaml").read_text())


def test_corpus_refusals_use_the_statements_names(engine: Engine) -> None:
    refused = 0
    leaks = []
    for entry in CORPUS:
        sql = entry["sql"]
        try:
            engine.prepare(sql)
        except DpsqlError as err:
            refused += 1
            leaked = names_leaked(sql, err)
            if leaked:
                leaks.append((sql, err.message, leaked))
    assert refused > 100  # the corpus is mostly refusals: the check ran on them
    assert not leaks, leaks
