"""psql against ``dpsql serve``: what an analyst reads for statements the last newcomer typed in
psql (newcomer22).

#9: ``SELECT avg(amount) FROM purchases WHERE category = 'Books'`` (the keys are lower case) was
charged and answered NULL or a noise value; now one row, NULL, free, with psql printing the
notice naming the keys and the likely typo. #19: ``upper()`` of a keyed column typed as an enum
is covered by tests/integration/engine/test_own_sql_failures.py (the demo has no enum).
"""

from __future__ import annotations

from tests.compat.conftest import Server, require
from tests.compat.test_external_clients import psql


def test_a_where_no_row_can_pass_is_free_with_its_notice(dpsql_server: Server) -> None:
    require("psql")
    before = psql(dpsql_server, "-A", "-t", "-c", "TABLE dpsql.history")
    assert before.returncode == 0, before.stderr
    out = psql(
        dpsql_server, "-A", "-c", "SELECT avg(amount) FROM purchases WHERE category = 'Books'"
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[:3] == ["avg", "", "(1 row)"], out.stdout
    assert "NOTICE:  the WHERE clause leaves no declared key of category" in out.stderr
    assert "keys are compared exactly: write 'books'" in out.stderr
    after = psql(dpsql_server, "-A", "-t", "-c", "TABLE dpsql.history")
    assert after.stdout == before.stdout  # nothing charged: no release in the history
