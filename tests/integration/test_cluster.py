import psycopg


def test_cluster_answers(make_db):
    dsn = make_db("smoke")
    with psycopg.connect(dsn) as conn:
        assert conn.execute("select 1 + 1").fetchone() == (2,)
