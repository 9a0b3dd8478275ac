"""dpsql's own SQL failing in PostgreSQL: told apart from the analyst's statement failing.

A private statement runs SQL dpsql wrote (:mod:`dpsql.execute.private_sql`: clamped,
contribution-bounded, the keys hashed; the ``auto`` bounds' histogram query). When PostgreSQL
refuses that SQL while *parsing* it (raw parse and parse analysis: names, types, operators and
functions resolved against the catalog, constants read by their types' input functions), the
fault is dpsql's: the statement was accepted and the SQL built from it is wrong (an enum key
hashed as text, a policy's ``numeric`` column that is ``money`` upstream). Such a failure is
told as dpsql's own (XX000, PostgreSQL's words, the statement's fingerprint, "report it"),
not as the analyst's ("check casts and divisions"), and its reservation is refunded.

Whether a failure was a parse failure is decided by sending the same text again as a Parse
message only (:func:`parse_failure`): PostgreSQL parses and analyses it there and neither plans
nor executes it, so no row and no statistic of a table is read. Its outcome is a function of the
SQL text and the catalog, nothing else: refunding on it can't depend on the private rows. (The
text holds the statement's constants, the policy's bounds and keys, a fresh salt, and the values
of ``auto`` bounds chosen earlier in the statement, which were charged and stay so.) A failure
Parse does not reproduce happened later (planning, execution): it keeps PostgreSQL's class and
the ledger's rule (:func:`dpsql.budget.records.refundable`): a division by zero or an overflow
may depend on one row's value and stays charged. docs/budget.md, "Crash safety".
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import psycopg
from psycopg.pq import DiagnosticField, ExecStatus

from dpsql.errors import DpsqlError, InternalError, UpstreamError

if TYPE_CHECKING:
    from dpsql.execute.backend import Backend, CancelToken, Rows

log = logging.getLogger(__name__)

# classes a Parse can't explain: a lost connection, a cancel or timeout, resources
_NOT_PARSE = ("08", "53", "57", "58", "XX")


@dataclass(frozen=True)
class ParseFailure:
    """PostgreSQL's refusal of a text at Parse: its SQLSTATE and words."""

    sqlstate: str
    message: str
    hint: str


def parse_failure(backend: Backend, text: str) -> ParseFailure | None:
    """PostgreSQL's error when ``text`` is sent as an (unnamed) Parse message alone, or None
    when it parses: raw parse and parse analysis against the catalog; nothing planned, nothing
    executed, no table's rows or statistics read."""
    from dpsql.execute.backend import use_zone
    from dpsql.upstream.faults import CONNECT_TIMEOUT_S
    from dpsql.upstream.zone import wanted

    try:
        with backend.pool.connection(timeout=CONNECT_TIMEOUT_S) as conn:
            try:
                use_zone(conn, wanted())
                res = conn.pgconn.prepare(b"", text.encode())
                if res.status == ExecStatus.COMMAND_OK:
                    return None
                return ParseFailure(
                    _field(res, DiagnosticField.SQLSTATE) or "XX000",
                    _field(res, DiagnosticField.MESSAGE_PRIMARY),
                    _field(res, DiagnosticField.MESSAGE_HINT),
                )
            finally:
                if not conn.closed:
                    conn.rollback()
    except (psycopg.Error, OSError):
        return None  # not decided: the failure keeps its class's rule


def _field(res: Any, field: DiagnosticField) -> str:
    got = res.error_field(field)
    return got.decode("utf-8", "replace") if got else ""


CHARGED_BEFORE = (
    "Nothing of it was charged; bounds chosen from the data earlier in the statement stay "
    "charged (SELECT * FROM dpsql.history shows each part)"
)


def own_failure(
    failure: ParseFailure,
    fingerprint: str,
    what: str = "this statement's answer",
    charged: str = CHARGED_BEFORE,
) -> InternalError:
    """The analyst's error for dpsql's own SQL refused at Parse (``failure``): XX000, marked as
    decided before the data (its reservation refunded: :func:`dpsql.budget.records.refundable`);
    ``charged``: what the statement was charged."""
    words = failure.message + (f" ({failure.hint})" if failure.hint else "")
    e = InternalError(
        "dpsql wrote SQL for this statement that PostgreSQL refused: a fault in dpsql, not in "
        "your statement",
        detail=f"PostgreSQL refused the SQL dpsql wrote for {what} while parsing it, before "
        f"reading any row (SQLSTATE {failure.sqlstate}: {words}). {charged}",
        hint=f"report it to the data owner with the statement's fingerprint {fingerprint}; "
        "until it is fixed, a statement written another way (another aggregate, a cast of the "
        "column) may be answered",
    )
    e.before_data = True
    return e


def explained(
    backend: Backend, text: str, error: DpsqlError, fingerprint: str, what: str = ""
) -> DpsqlError:
    """``error`` of running dpsql's own ``text`` on the private rows, told as dpsql's fault
    (:func:`own_failure`) when PostgreSQL refuses ``text`` at Parse, else unchanged."""
    if not isinstance(error, UpstreamError) or error.sqlstate[:2] in _NOT_PARSE:
        return error
    failure = parse_failure(backend, text)
    if failure is None or failure.sqlstate[:2] != error.sqlstate[:2]:
        return error  # parses (or not the same class): it failed later, keeps its rule
    log.error(
        "dpsql's own SQL for statement %s was refused by PostgreSQL at Parse (SQLSTATE %s: %s); "
        "the SQL: %s",
        fingerprint,
        failure.sqlstate,
        failure.message,
        text,
    )
    return own_failure(failure, fingerprint, *((what,) if what else ()))


def run(
    backend: Backend,
    text: str,
    fingerprint: str,
    *,
    cancel: CancelToken | None = None,
    then: str | None = None,
    what: str = "",
) -> Rows:
    """:meth:`Backend.run` of dpsql's own ``text`` on the private rows, a Parse failure of it
    told as dpsql's fault (:func:`explained`)."""
    try:
        return backend.run(text, private=True, cancel=cancel, then=then)
    except UpstreamError as e:
        raise explained(backend, text, e, fingerprint, what) from None
