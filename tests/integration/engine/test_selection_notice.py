"""Groups chosen from the data (partition selection) appear only past a noisy threshold: the
answer says so, and says when no group passed (``SELECT amount::text, COUNT(*) ... GROUP BY 1``
answered 0 rows with no word, read as "no such groups"), and that the cut itself is noisy (the
count it compares has noise of its own). Declared keys get no such notice."""

from __future__ import annotations

import re
from fractions import Fraction

import psycopg

from dpsql.engine import Engine
from dpsql.session import SessionContext


def _notices(engine: Engine, sql: str) -> tuple[int, tuple[str, ...]]:
    s = SessionContext(analyst="analyst", delta=Fraction(1, 10**9))
    r = engine.execute(engine.prepare(sql), s)
    return len(r.rows), tuple(r.notices)


def test_groups_from_the_data_say_what_is_left_out(engine: Engine, demo_dsn: str) -> None:
    with psycopg.connect(demo_dsn) as conn:  # the premise of the false-failure bound below
        (most,) = conn.execute(
            "SELECT max(n) FROM (SELECT count(DISTINCT user_id) AS n FROM purchases "
            "WHERE amount BETWEEN 100 AND 100.05 GROUP BY amount::text) t"
        ).fetchone() or (0,)
    assert most <= 30
    # 6 amount texts (100.00 ... 100.05), each held by a few units, far below the threshold
    # (fixed demo policy, G = 5; at delta 1e-9 tau is about 230 for a noise scale of about
    # 11): a group of c units passes with P = P(Z >= tau - c) <= delta / G * e^((c - 1) / b),
    # so at c <= 30 the 6 groups pass with P < 6 * 2e-10 * e^3 < 3e-8 (false failure)
    n, notes = _notices(
        engine,
        "SELECT amount::text, COUNT(*) FROM purchases WHERE amount BETWEEN 100 AND 100.05 "
        "GROUP BY 1",
    )
    said = [t for t in notes if "come from the data" in t]
    assert n == 0 and len(said) == 1
    assert "(none did here)" in said[0] and "keys_from" in said[0] and "user_id" in said[0]
    # the cut is noisy itself (words30 (c)): its count's own noise, and the groups it may
    # leave out or show, from the threshold and that noise (the statement's level, 95%)
    got = re.search(
        r"threshold of ([\d,]+).*The cut is noisy itself: the count it compares is drawn apart "
        r"from the values shown, with noise of its own \(±([\d,]+) user_id at 95%\), so a group "
        r"of up to about ([\d,]+) user_id can be left out and one of as few as ([\d,]+) shown",
        said[0],
    )
    assert got is not None, said[0]
    tau, noise, above, below = (int(g.replace(",", "")) for g in got.groups())
    assert noise > 0 and above == tau + noise and below == max(1, tau - noise)


def test_declared_keys_have_no_such_notice(engine: Engine) -> None:
    _, notes = _notices(engine, "SELECT category, COUNT(*) FROM purchases GROUP BY category")
    assert not [t for t in notes if "come from the data" in t]


def test_a_mix_of_keys_says_which_come_from_the_data(engine: Engine) -> None:
    """newcomer30 W2: GROUP BY category, region, amount, purchased_at said "(no declared keys)"
    though category and region have them: the words name the keys without declared ones, and
    those that have them."""
    _, notes = _notices(
        engine,
        "SELECT category, region, amount, COUNT(*) FROM purchases "
        "WHERE amount BETWEEN 100 AND 100.05 GROUP BY category, region, amount",
    )
    (said,) = [t for t in notes if "come from the data" in t]
    assert "(no declared keys)" not in said, said
    assert (
        "groups of purchases.category, purchases.region, purchases.amount come from the data: "
        "purchases.amount has no declared keys (purchases.category and purchases.region do, "
        "but a group is a combination of all of them, so the data decide which appear). A "
        "group is shown only when its noisy count of user_id passes a threshold"
    ) in said, said
    assert "declare the keys of purchases.amount (keys:" in said.lower(), said
    _, notes = _notices(engine, "SELECT amount, COUNT(*) FROM purchases GROUP BY amount")
    (said,) = [t for t in notes if "come from the data" in t]
    assert "come from the data (no declared keys): a group is shown only when" in said, said
    assert "Declare the keys of purchases.amount (keys:" in said, said
