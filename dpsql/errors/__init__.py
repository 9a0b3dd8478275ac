"""The one error hierarchy of dpsql.

Every refusal or failure is a :class:`DpsqlError` subclass carrying a PostgreSQL SQLSTATE. Only the
wire session turns these into ``ErrorResponse`` messages; the CLI prints them. A message says what was
wrong; ``hint`` says what to do instead.

As psycopg's ``errors`` module: one class per SQLSTATE dpsql sends, each under the class of its
SQLSTATE family (the code's first two characters, e.g. :class:`DataException` for 22xxx), and
:func:`lookup` finds the class of a code (its family's for a code without one of its own).
Code raises the class; ``sqlstate=`` is for codes that come from PostgreSQL (upstream errors),
which :mod:`dpsql.errors.upstream` turns into dpsql's words.

>>> e = PrivacyViolation("column users.email is an identifier", hint="aggregate it")
>>> (e.sqlstate, str(e))
('42501', 'column users.email is an identifier')
>>> lookup("42501") is PrivacyViolation, lookup("42999") is SyntaxErrorOrAccessRuleViolation
(True, True)
"""

from __future__ import annotations

_BY_SQLSTATE: dict[str, type[DpsqlError]] = {}


class DpsqlError(Exception):
    """Base class. ``sqlstate`` is the PostgreSQL error code sent to clients.

    A subclass that sets ``sqlstate`` is registered for it (the first one to claim a code);
    a family class sets the family's ``NN000`` code.
    """

    sqlstate: str = "XX000"  # a class's own; an instance's when PostgreSQL sent the code
    severity: str = "ERROR"
    # set on a refusal dpsql decided before anything ran on the private rows, while a budget
    # was already reserved (a catalog check just before the private query): nothing was read,
    # so the reservation is refunded (dpsql.budget.records.before_the_data, refundable)
    before_data: bool = False

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        code = cls.__dict__.get("sqlstate")
        if isinstance(code, str):
            _BY_SQLSTATE.setdefault(code, cls)

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
            self.sqlstate = sqlstate

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


# ---- families (the SQLSTATE class: the code's first two characters) ------------------------
class ConnectionException(DpsqlError):
    """Class 08: the connection (lost, or the protocol broken)."""

    sqlstate = "08000"


class FeatureNotSupported(DpsqlError):
    """Class 0A: SQL or a protocol feature dpsql does not (yet) answer (0A000)."""

    sqlstate = "0A000"


class DataException(DpsqlError):
    """Class 22: a value that is not valid for its use."""

    sqlstate = "22000"


class InvalidTransactionState(DpsqlError):
    """Class 25: a statement the transaction's state does not allow."""

    sqlstate = "25000"


class InvalidSqlStatementName(DpsqlError):
    """Class 26: a prepared statement that does not exist (26000)."""

    sqlstate = "26000"


class InvalidAuthorizationSpecification(DpsqlError):
    """Class 28: authentication refused (28000)."""

    sqlstate = "28000"
    severity = "FATAL"


class InvalidCursorName(DpsqlError):
    """Class 34: a portal that does not exist (34000)."""

    sqlstate = "34000"


class SavepointException(DpsqlError):
    """Class 3B: a savepoint misuse."""

    sqlstate = "3B000"


class InvalidCatalogName(DpsqlError):
    """Class 3D: a database that does not exist (the server serves one)."""

    sqlstate = "3D000"
    severity = "FATAL"


class SyntaxErrorOrAccessRuleViolation(DpsqlError):
    """Class 42: syntax, names and privileges."""

    sqlstate = "42000"


class InsufficientResources(DpsqlError):
    """Class 53: a limit on resources (budgets, connections)."""

    sqlstate = "53000"


class ProgramLimitExceeded(DpsqlError):
    """Class 54: a statement over one of dpsql's size limits, e.g. too many grouping sets."""

    sqlstate = "54000"


class ObjectNotInPrerequisiteState(DpsqlError):
    """Class 55: an object that cannot be used or changed in its state."""

    sqlstate = "55000"


class OperatorIntervention(DpsqlError):
    """Class 57: cancelled, or the server shutting down or starting."""

    sqlstate = "57000"


class ExternalSystemError(DpsqlError):
    """Class 58: a failure outside dpsql and its statement, e.g. the privacy ledger's database
    unavailable (58000 system_error)."""

    sqlstate = "58000"


class ConfigFileError(DpsqlError):
    """Class F0: the policy file is invalid (F0000)."""

    sqlstate = "F0000"


class InternalError(DpsqlError):
    """Class XX: a bug in dpsql (XX000)."""

    sqlstate = "XX000"


# ---- class 08 ----------------------------------------------------------------------------
class ProtocolViolation(ConnectionException):
    sqlstate = "08P01"


class ConnectionFailure(ConnectionException):
    """The database connection was lost or could not be made (08006; 57P01-57P03 when the
    database said it is shutting down or starting). Safe to retry."""

    sqlstate = "08006"


# ---- class 0A ----------------------------------------------------------------------------
UnsupportedSql = FeatureNotSupported  # the name most of dpsql raises


# ---- class 22 ----------------------------------------------------------------------------
class InvalidParameter(DataException):
    """A bad parameter value such as epsilon <= 0 (22023 invalid_parameter_value)."""

    sqlstate = "22023"


class CharacterNotInRepertoire(DataException, ProtocolViolation):
    """Bytes that are not valid UTF-8 (22021). Also a :class:`ProtocolViolation`: the message
    decoder raises it, and every failure of the decoder is one."""

    sqlstate = "22021"


class DivisionByZero(DataException):
    """A division by a literal zero, refused before anything is charged (22012)."""

    sqlstate = "22012"


class NumericValueOutOfRange(DataException):
    """A number outside its type's range, e.g. a numeric literal PostgreSQL cannot hold (22003)."""

    sqlstate = "22003"


class InvalidRowCountInLimitClause(DataException):
    """A negative constant LIMIT, refused before anything is charged (2201W)."""

    sqlstate = "2201W"


class InvalidRowCountInResultOffsetClause(DataException):
    """A negative constant OFFSET, refused before anything is charged (2201X)."""

    sqlstate = "2201X"


class InvalidTextRepresentation(DataException):
    """A parameter value that does not parse as its type (22P02)."""

    sqlstate = "22P02"


class InvalidBinaryRepresentation(DataException):
    """A binary parameter value that is not its type's binary format (22P03)."""

    sqlstate = "22P03"


# ---- class 25 ----------------------------------------------------------------------------
class ActiveSqlTransaction(InvalidTransactionState):
    """A statement that cannot run inside a transaction block (25001)."""

    sqlstate = "25001"


class ReadOnlyTransaction(InvalidTransactionState):
    sqlstate = "25006"


class NoActiveSqlTransaction(InvalidTransactionState):
    """A statement that can only run inside a transaction block (25P01)."""

    sqlstate = "25P01"


class InFailedTransaction(InvalidTransactionState):
    sqlstate = "25P02"


# ---- class 28 ----------------------------------------------------------------------------
InvalidAuthorization = InvalidAuthorizationSpecification


class AuthenticationFailed(InvalidAuthorizationSpecification):
    sqlstate = "28P01"


# ---- class 3B ----------------------------------------------------------------------------
class InvalidSavepointSpecification(SavepointException):
    sqlstate = "3B001"


# ---- class 3F ----------------------------------------------------------------------------
class InvalidSchemaName(DpsqlError):
    """Class 3F: a schema that does not exist, or holds nothing to read (3F000
    invalid_schema_name)."""

    sqlstate = "3F000"


# ---- class 42 ----------------------------------------------------------------------------
class PrivacyViolation(SyntaxErrorOrAccessRuleViolation):
    """Raw-row access, identifier use, an unbounded column (42501 insufficient_privilege)."""

    sqlstate = "42501"


class SqlSyntaxError(SyntaxErrorOrAccessRuleViolation):
    """The statement does not parse (42601)."""

    sqlstate = "42601"


class AmbiguousColumn(SyntaxErrorOrAccessRuleViolation):
    sqlstate = "42702"


class UndefinedColumn(SyntaxErrorOrAccessRuleViolation):
    sqlstate = "42703"


class UndefinedObject(SyntaxErrorOrAccessRuleViolation):
    sqlstate = "42704"


class UndefinedFunction(SyntaxErrorOrAccessRuleViolation):
    """A function PostgreSQL doesn't have for these argument types, e.g. avg(date) (42883)."""

    sqlstate = "42883"


class GroupingError(SyntaxErrorOrAccessRuleViolation):
    """A GROUP BY / GROUPING() misuse PostgreSQL would reject as well (42803)."""

    sqlstate = "42803"


class WrongObjectType(SyntaxErrorOrAccessRuleViolation):
    """An object used as what it is not, e.g. an ordered-set aggregate without WITHIN GROUP
    (42809)."""

    sqlstate = "42809"


class UndefinedTable(SyntaxErrorOrAccessRuleViolation):
    sqlstate = "42P01"


class UndefinedParameter(SyntaxErrorOrAccessRuleViolation):
    """A ``$n`` placeholder without a value (``SELECT $1`` in a simple query)."""

    sqlstate = "42P02"


class DuplicateCursor(SyntaxErrorOrAccessRuleViolation):
    """A portal name already in use (42P03)."""

    sqlstate = "42P03"


class DuplicatePreparedStatement(SyntaxErrorOrAccessRuleViolation):
    sqlstate = "42P05"


class DuplicateTable(SyntaxErrorOrAccessRuleViolation):
    """A table that already exists (a release's ``--to-table`` without ``--replace``)."""

    sqlstate = "42P07"


class InvalidColumnReference(SyntaxErrorOrAccessRuleViolation):
    sqlstate = "42P10"


class IndeterminateDatatype(SyntaxErrorOrAccessRuleViolation):
    """A Parse parameter neither typed nor used (``SELECT $2`` without a type for ``$1``)."""

    sqlstate = "42P18"


# ---- class 53 ----------------------------------------------------------------------------
class TooManyConnections(InsufficientResources):
    sqlstate = "53300"


class BudgetExhausted(InsufficientResources):
    """The release would exceed a privacy budget (53400 configuration_limit_exceeded)."""

    sqlstate = "53400"


# ---- class 54 ----------------------------------------------------------------------------
class StatementTooComplex(ProgramLimitExceeded):
    """A statement too large or too deeply nested for dpsql to rewrite (54001)."""

    sqlstate = "54001"


# ---- class 55 ----------------------------------------------------------------------------
class CantChangeRuntimeParam(ObjectNotInPrerequisiteState):
    """A setting that cannot be changed now (55P02)."""

    sqlstate = "55P02"


# ---- class 57 ----------------------------------------------------------------------------
class QueryCanceled(OperatorIntervention):
    sqlstate = "57014"


class AdminShutdown(OperatorIntervention):
    """The server is shutting down (57P01): the session ends."""

    sqlstate = "57P01"


class CannotConnectNow(OperatorIntervention):
    """The server is starting or stopping and takes no new connection (57P03)."""

    sqlstate = "57P03"


# ---- class 58 ----------------------------------------------------------------------------
class IoError(ExternalSystemError):
    """A file could not be written or read (58030 io_error)."""

    sqlstate = "58030"


class DuplicateFile(ExternalSystemError):
    """A file to write exists already (58P02 duplicate_file)."""

    sqlstate = "58P02"


# ---- class F0 ----------------------------------------------------------------------------
PolicyError = ConfigFileError


# ---- from PostgreSQL -----------------------------------------------------------------------
class ConstantRejected(DataException):
    """PostgreSQL's own error for a statement's constants (``amount > 'abc'``: 22P02 "invalid
    input syntax for type numeric"), from a probe that reads no table
    (:mod:`dpsql.execute.constant_probe`): relayed with its SQLSTATE (``sqlstate=``) and words,
    decided from the statement alone, before anything is charged."""


class UpstreamError(DpsqlError):
    """An error from PostgreSQL (its own SQLSTATE, given as ``sqlstate=``). On private queries
    the text is replaced, the class kept."""


class NoSuchObject(DpsqlError):
    """A name written as a literal in a catalog statement that is missing or hidden: PostgreSQL's
    error for a missing one (its SQLSTATE given as ``sqlstate=``), decided by dpsql's catalog
    guards (:mod:`dpsql.catalog.missing`) from the name alone, not by the data."""


def lookup(sqlstate: str) -> type[DpsqlError]:
    """The class of ``sqlstate``: its own, else its family's, else :class:`DpsqlError`.

    >>> lookup("57014").__name__, lookup("22008").__name__, lookup("P0001").__name__
    ('QueryCanceled', 'DataException', 'DpsqlError')
    """
    return _BY_SQLSTATE.get(sqlstate) or _BY_SQLSTATE.get(sqlstate[:2] + "000") or DpsqlError
