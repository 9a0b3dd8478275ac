"""The one error hierarchy of dpsql.

Every refusal or failure is a :class:`DpsqlError` subclass carrying a PostgreSQL SQLSTATE. Only the
wire session turns these into ``ErrorResponse`` messages; the CLI prints them. A message says what was
wrong; ``hint`` says what to do instead.

>>> e = PrivacyViolation("column users.email is an identifier", hint="aggregate it")
>>> (e.sqlstate, str(e))
('42501', 'column users.email is an identifier')
"""

from __future__ import annotations

from typing import ClassVar


class DpsqlError(Exception):
    """Base class. ``sqlstate`` is the PostgreSQL error code sent to clients."""

    sqlstate: ClassVar[str] = "XX000"
    severity: ClassVar[str] = "ERROR"

    def __init__(
        self,
        message: str,
        *,
        detail: str | None = None,
        hint: str | None = None,
        position: int | None = None,
        sqlstate: str | None = None,
    ) -> None:
        super().__init__(message)
        self.message = message
        self.detail = detail
        self.hint = hint
        self.position = position
        if sqlstate is not None:
            self.sqlstate = sqlstate  # type: ignore[misc]

    def fields(self) -> dict[str, str]:
        """The ErrorResponse fields (PostgreSQL field codes) for this error."""
        out = {"S": self.severity, "V": self.severity, "C": self.sqlstate, "M": self.message}
        if self.detail:
            out["D"] = self.detail
        if self.hint:
            out["H"] = self.hint
        if self.position is not None:
            out["P"] = str(self.position)
        return out

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.sqlstate}: {self.message!r})"


class SqlSyntaxError(DpsqlError):
    """The statement does not parse (42601)."""

    sqlstate = "42601"


class PrivacyViolation(DpsqlError):
    """Raw-row access, identifier use, an unbounded column (42501 insufficient_privilege)."""

    sqlstate = "42501"


class UnsupportedSql(DpsqlError):
    """SQL that dpsql does not (yet) answer privately (0A000 feature_not_supported)."""

    sqlstate = "0A000"


class GroupingError(DpsqlError):
    """A GROUP BY / GROUPING() misuse PostgreSQL would reject as well (42803)."""

    sqlstate = "42803"


class ProgramLimitExceeded(DpsqlError):
    """A statement over one of dpsql's size limits, e.g. too many grouping sets (54000)."""

    sqlstate = "54000"


class StatementTooComplex(ProgramLimitExceeded):
    """A statement too large or too deeply nested for dpsql to rewrite (54001)."""

    sqlstate = "54001"


class InvalidParameter(DpsqlError):
    """A bad privacy parameter such as epsilon <= 0 (22023 invalid_parameter_value)."""

    sqlstate = "22023"


class UndefinedTable(DpsqlError):
    sqlstate = "42P01"


class UndefinedColumn(DpsqlError):
    sqlstate = "42703"


class UndefinedParameter(DpsqlError):
    """A ``$n`` placeholder without a value (``SELECT $1`` in a simple query)."""

    sqlstate = "42P02"


class IndeterminateDatatype(DpsqlError):
    """A Parse parameter neither typed nor used (``SELECT $2`` without a type for ``$1``)."""

    sqlstate = "42P18"


class UndefinedObject(DpsqlError):
    sqlstate = "42704"


class InvalidColumnReference(DpsqlError):
    sqlstate = "42P10"


class BudgetExhausted(DpsqlError):
    """The release would exceed a privacy budget (53400 configuration_limit_exceeded)."""

    sqlstate = "53400"


class TooManyConnections(DpsqlError):
    sqlstate = "53300"


class PolicyError(DpsqlError):
    """The policy file is invalid (F0000 config_file_error)."""

    sqlstate = "F0000"


class ProtocolViolation(DpsqlError):
    sqlstate = "08P01"


class AuthenticationFailed(DpsqlError):
    sqlstate = "28P01"
    severity = "FATAL"


class InvalidAuthorization(DpsqlError):
    sqlstate = "28000"
    severity = "FATAL"


class InvalidCatalogName(DpsqlError):
    """A database that does not exist (the server serves one)."""

    sqlstate = "3D000"
    severity = "FATAL"


class ReadOnlyTransaction(DpsqlError):
    sqlstate = "25006"


class InFailedTransaction(DpsqlError):
    sqlstate = "25P02"


class QueryCanceled(DpsqlError):
    sqlstate = "57014"


class ConnectionFailure(DpsqlError):
    """The database connection was lost or could not be made (08006; 57P01-57P03 when the
    database said it is shutting down or starting). Safe to retry."""

    sqlstate = "08006"


class UpstreamError(DpsqlError):
    """An error from PostgreSQL. On private queries the text is replaced, the class kept."""


class InternalError(DpsqlError):
    """A bug in dpsql (XX000)."""

    sqlstate = "XX000"


def sanitized_upstream(sqlstate: str | None) -> UpstreamError:
    """An upstream error on a private query, stripped of its text (which may contain row values).

    The SQLSTATE class (first two characters) is kept so clients can still tell kinds apart.

    >>> sanitized_upstream("22012").sqlstate
    '22000'
    """
    cls = (sqlstate or "XX")[:2]
    code = cls + "000"
    return UpstreamError(
        "the private query failed in the database",
        detail=f"error class {code}; the database's message is withheld because it may contain "
        "private values",
        hint="check casts and divisions in the query; make expressions total (e.g. NULLIF guards)",
        sqlstate=code,
    )
