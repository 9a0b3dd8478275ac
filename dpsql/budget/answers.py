"""Free repeats: the store of noisy answers, keyed by the query's canonical cache key.

An answer is stored by :meth:`Ledger.commit` in the same transaction that confirms its release,
before any row leaves dpsql, so a repeat always returns what was released. Whose answers a repeat
may see is the policy's ``repeats`` switch: ``analyst`` (own answers), ``global`` (any analyst's on
the dataset) or ``off``.
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING

import psycopg

from dpsql.budget.records import Reservation, Stored
from dpsql.policy.model import Policy

if TYPE_CHECKING:
    from dpsql.budget.store import LedgerStore


def repeat_scope(policy: Policy, analyst: str) -> str:
    """Whose stored answers a lookup may see: the dataset's (global) or the analyst's own."""
    return "dataset" if policy.repeats == "global" else f"analyst:{analyst}"


def _key(ledger: LedgerStore, analyst: str, cache_key: str) -> list[str]:
    return [ledger.dataset, repeat_scope(ledger.policy, analyst), cache_key]


def store(
    ledger: LedgerStore, conn: psycopg.Connection, res: Reservation, cache_key: str, payload: bytes
) -> bytes | None:
    """Store ``payload`` for the key as the answer of release ``res`` (inside the commit's
    transaction).

    Returns None, or the payload a concurrent identical query stored first (to return instead).
    """
    key = _key(ledger, res.analyst, cache_key)
    stored = conn.execute(
        ledger.q(
            "INSERT INTO {s}.answer (dataset, scope, cache_key, payload, release_id)"
            " VALUES (%s, %s, %s, %s, %s) ON CONFLICT DO NOTHING RETURNING release_id"
        ),
        [*key, payload, res.id],
    ).fetchone()
    if stored is not None:
        return None
    return _payload(ledger, conn, key)


def _payload(ledger: LedgerStore, conn: psycopg.Connection, key: list[str]) -> bytes | None:
    """The payload stored under ``key`` (:func:`_key`), if any."""
    prev = conn.execute(
        ledger.q(
            "SELECT payload FROM {s}.answer WHERE dataset = %s AND scope = %s AND cache_key = %s"
        ),
        key,
    ).fetchone()
    return bytes(prev[0]) if prev is not None else None


def settle_and_store(
    ledger: LedgerStore, conn: psycopg.Connection, res: Reservation, cache_key: str, payload: bytes
) -> tuple[bool, bytes | None]:
    """Mark reservation ``res`` committed and store ``payload`` for the key in ONE
    statement (atomic on its own: no BEGIN and COMMIT round trips), the answer stored only when
    the reservation was open. Returns whether it was, and None or the payload a concurrent
    identical query stored first (read after, as :func:`store` reads it)."""
    key = _key(ledger, res.analyst, cache_key)
    row = conn.execute(
        ledger.q(
            "WITH settled AS (UPDATE {s}.release SET state = 'committed',"
            " settled_at = clock_timestamp() WHERE id = %s AND state = 'reserved' RETURNING id),"
            " stored AS (INSERT INTO {s}.answer (dataset, scope, cache_key, payload, release_id)"
            " SELECT %s, %s, %s, %s, id FROM settled ON CONFLICT DO NOTHING RETURNING release_id)"
            " SELECT (SELECT count(*) FROM settled), (SELECT count(*) FROM stored)"
        ),
        [res.id, *key, payload],
    ).fetchone()
    assert row is not None
    if not row[0]:
        return False, None
    if row[1]:
        return True, None
    return True, _payload(ledger, conn, key)


def alias(
    ledger: LedgerStore, conn: psycopg.Connection, analyst: str, stored_key: str, cache_key: str
) -> bool:
    """Store the answer kept under ``stored_key`` under ``cache_key`` too (the same release:
    its payload and release id); an answer already under ``cache_key`` stays. Whether
    ``cache_key`` now has an answer."""
    src, dst = _key(ledger, analyst, stored_key), _key(ledger, analyst, cache_key)
    conn.execute(
        ledger.q(
            "INSERT INTO {s}.answer (dataset, scope, cache_key, payload, release_id)"
            " SELECT dataset, scope, %s, payload, release_id FROM {s}.answer"
            " WHERE dataset = %s AND scope = %s AND cache_key = %s ON CONFLICT DO NOTHING"
        ),
        [dst[2], *src],
    )
    return exists(ledger, conn, analyst, cache_key)


def lookup(
    ledger: LedgerStore,
    conn: psycopg.Connection,
    analyst: str,
    cache_key: str,
    statement: str | None = None,
) -> Stored | None:
    """The stored answer for the key and the release it repeats, recording the free repeat in
    the analyst's history, in one statement (one round trip, atomic on an autocommit
    connection: the repeat is recorded exactly when the answer is returned; a miss records
    nothing). The history row shows ``statement``, the text the analyst ran (another page of
    an answer, a statement of several whose part was answered before), else the stored
    answer's own."""
    got = conn.execute(
        ledger.q(
            "WITH hit AS (SELECT a.payload, r.fingerprint, r.statement, r.id, r.created_at,"
            " r.epsilon, r.analyst FROM {s}.answer a"
            " JOIN {s}.release r ON r.id = a.release_id"
            " WHERE a.dataset = %s AND a.scope = %s AND a.cache_key = %s),"
            " rec AS (INSERT INTO {s}.release (dataset, analyst, fingerprint, epsilon, delta, rho,"
            " state, statement) SELECT %s, %s, fingerprint, '0', '0', '0', 'repeat',"
            " COALESCE(%s, statement)"
            " FROM hit)"
            " SELECT payload, id, created_at, epsilon, analyst FROM hit"
        ),
        [*_key(ledger, analyst, cache_key), ledger.dataset, analyst, statement],
    ).fetchone()
    if got is None:
        return None
    payload, rid, at, eps, who = got
    return Stored(bytes(payload), int(rid), at, Fraction(eps), who == analyst)


def peek(
    ledger: LedgerStore, conn: psycopg.Connection, analyst: str, cache_key: str
) -> bytes | None:
    """The stored payload for the key, read only (records no repeat): a contribution bound
    chosen earlier (dpsql.execute.auto_bounds) is reused by every later statement over its
    slice, which the history need not list each time."""
    got = conn.execute(
        ledger.q(
            "SELECT payload FROM {s}.answer WHERE dataset = %s AND scope = %s AND cache_key = %s"
        ),
        _key(ledger, analyst, cache_key),
    ).fetchone()
    return bytes(got[0]) if got is not None else None


def exists(ledger: LedgerStore, conn: psycopg.Connection, analyst: str, cache_key: str) -> bool:
    """Whether the analyst's repeat of the key would be answered from the store (read only)."""
    got = conn.execute(
        ledger.q("SELECT 1 FROM {s}.answer WHERE dataset = %s AND scope = %s AND cache_key = %s"),
        _key(ledger, analyst, cache_key),
    ).fetchone()
    return got is not None
