"""dpsql's cursor positions (dpsql.wire.cursors.move: FETCH / MOVE over the rows a DECLARE
holds) are PostgreSQL's own: the same FETCH and MOVE sequences on a real PostgreSQL cursor
return the same rows and counts, on 5, 1 and 0 rows."""

from __future__ import annotations

import psycopg

from dpsql.wire.cursors import move, parse_cursor_statement

SEQUENCES = [
    ["FETCH 2 FROM c", "FETCH 2 FROM c", "FETCH 2 FROM c", "FETCH 1 FROM c"],
    ["FETCH ALL FROM c", "FETCH BACKWARD 2 FROM c", "FETCH RELATIVE 0 FROM c",
     "FETCH BACKWARD ALL FROM c"],
    ["FETCH LAST FROM c", "FETCH ABSOLUTE 9 FROM c", "FETCH RELATIVE -1 FROM c",
     "FETCH ABSOLUTE 0 FROM c"],
    ["FETCH 3 FROM c", "MOVE BACKWARD 5 FROM c", "FETCH NEXT FROM c", "FETCH -1 FROM c",
     "FETCH 0 FROM c", "FETCH RELATIVE 2 FROM c", "FETCH PRIOR FROM c", "FETCH FORWARD 0 FROM c",
     "FETCH FIRST FROM c", "FETCH ABSOLUTE -2 FROM c", "FETCH ABSOLUTE -9 FROM c",
     "MOVE ALL IN c", "FETCH NEXT FROM c"],
]  # fmt: skip


def test_positions_are_postgresqls(pg_admin_dsn: str) -> None:
    with psycopg.connect(pg_admin_dsn) as conn:
        for n in (5, 1, 0):
            for seq in SEQUENCES:
                conn.execute(
                    f"DECLARE c SCROLL CURSOR FOR SELECT g FROM generate_series(0, {n - 1}) g"
                )
                pos = 0
                for q in seq:
                    cur = conn.execute(q)
                    st = parse_cursor_statement(q)
                    assert st is not None
                    rows, pos = move(pos, n, st.direction, st.count)
                    if q.startswith("FETCH"):
                        assert [r[0] for r in cur.fetchall()] == rows, (n, seq, q)
                    else:
                        assert cur.statusmessage == f"MOVE {len(rows)}", (n, seq, q)
                conn.execute("CLOSE c")
            conn.rollback()
