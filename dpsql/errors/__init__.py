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
# the classes whose errors end the session, as PostgreSQL's do (severity FATAL, and so their
# subclasses'): authentication refused, a database that does not exist
_FATAL = frozenset({"28000", "3D000"})


class DpsqlError(Exception):
    """Base class. ``sqlstate`` is the PostgreSQL error code sent to clients.

    A subclass names its code as a class argument, as psycopg's do (``class
    QueryCanceled(OperatorIntervention, sqlstate="57014")``): it is registered for it (the
    first one to claim a code); a family class names the family's ``NN000`` code. A class of
    :data:`_FATAL`'s codes, and so its subclasses, sends severity FATAL.
    """

    sqlstate: str = "XX000"  # a class's own; an instance's when PostgreSQL sent the code
    severity: str = "ERROR"
    # set on a refusal dpsql decided before anything ran on the private rows, while a budget
    # was already reserved (a catalog check just before the private query): nothing was read,
    # so the reservation is refunded (dpsql.budget.records.before_the_data, refundable)
    before_data: bool = False

    def __init_subclass__(cls, sqlstate: str | None = None, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        if sqlstate is not None:
            cls.sqlstate = sqlstate
            _BY_SQLSTATE.setdefault(sqlstate, cls)
            if sqlstate in _FATAL:
                cls.severity = "FATAL"

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
class ConnectionException(DpsqlError, sqlstate="08000"):
    """Class 08: the connection (lost, or the protocol broken)."""


class FeatureNotSupported(DpsqlError, sqlstate="0A000"):
    """Class 0A: SQL or a protocol feature dpsql does not (yet) answer (0A000)."""


class DataException(DpsqlError, sqlstate="22000"):
    """Class 22: a value that is not valid for its use."""


class InvalidTransactionState(DpsqlError, sqlstate="25000"):
    """Class 25: a statement the transaction's state does not allow."""


class InvalidSqlStatementName(DpsqlError, sqlstate="26000"):
    """Class 26: a prepared statement that does not exist (26000)."""


class InvalidAuthorizationSpecification(DpsqlError, sqlstate="28000"):
    """Class 28: authentication refused (28000)."""


class InvalidCursorName(DpsqlError, sqlstate="34000"):
    """Class 34: a portal that does not exist (34000)."""


class SavepointException(DpsqlError, sqlstate="3B000"):
    """Class 3B: a savepoint misuse."""


class InvalidCatalogName(DpsqlError, sqlstate="3D000"):
    """Class 3D: a database that does not exist (the server serves one)."""


class SyntaxErrorOrAccessRuleViolation(DpsqlError, sqlstate="42000"):
    """Class 42: syntax, names and privileges."""


class InsufficientResources(DpsqlError, sqlstate="53000"):
    """Class 53: a limit on resources (budgets, connections)."""


class ProgramLimitExceeded(DpsqlError, sqlstate="54000"):
    """Class 54: a statement over one of dpsql's size limits, e.g. too many grouping sets."""


class ObjectNotInPrerequisiteState(DpsqlError, sqlstate="55000"):
    """Class 55: an object that cannot be used or changed in its state."""


class OperatorIntervention(DpsqlError, sqlstate="57000"):
    """Class 57: cancelled, or the server shutting down or starting."""


class ExternalSystemError(DpsqlError, sqlstate="58000"):
    """Class 58: a failure outside dpsql and its statement, e.g. the privacy ledger's database
    unavailable (58000 system_error)."""


class ConfigFileError(DpsqlError, sqlstate="F0000"):
    """Class F0: the policy file is invalid (F0000)."""


class InternalError(DpsqlError, sqlstate="XX000"):
    """Class XX: a bug in dpsql (XX000)."""


# ---- class 08 ----------------------------------------------------------------------------
class ProtocolViolation(ConnectionException, sqlstate="08P01"): ...


class ConnectionFailure(ConnectionException, sqlstate="08006"):
    """The database connection was lost or could not be made (08006; 57P01-57P03 when the
    database said it is shutting down or starting). Safe to retry."""


# ---- class 0A ----------------------------------------------------------------------------
UnsupportedSql = FeatureNotSupported  # the name most of dpsql raises


# ---- class 22 ----------------------------------------------------------------------------
class InvalidParameter(DataException, sqlstate="22023"):
    """A bad parameter value such as epsilon <= 0 (22023 invalid_parameter_value)."""


class CharacterNotInRepertoire(DataException, ProtocolViolation, sqlstate="22021"):
    """Bytes that are not valid UTF-8 (22021). Also a :class:`ProtocolViolation`: the message
    decoder raises it, and every failure of the decoder is one."""


class DivisionByZero(DataException, sqlstate="22012"):
    """A division by a literal zero, refused before anything is charged (22012)."""


class NumericValueOutOfRange(DataException, sqlstate="22003"):
    """A number outside its type's range, e.g. a numeric literal PostgreSQL cannot hold (22003)."""


class InvalidRowCountInLimitClause(DataException, sqlstate="2201W"):
    """A negative constant LIMIT, refused before anything is charged (2201W)."""


class InvalidRowCountInResultOffsetClause(DataException, sqlstate="2201X"):
    """A negative constant OFFSET, refused before anything is charged (2201X)."""


class InvalidTextRepresentation(DataException, sqlstate="22P02"):
    """A parameter value that does not parse as its type (22P02)."""


class InvalidBinaryRepresentation(DataException, sqlstate="22P03"):
    """A binary parameter value that is not its type's binary format (22P03)."""


# ---- class 25 ----------------------------------------------------------------------------
class ActiveSqlTransaction(InvalidTransactionState, sqlstate="25001"):
    """A statement that cannot run inside a transaction block (25001)."""


class ReadOnlyTransaction(InvalidTransactionState, sqlstate="25006"): ...


class NoActiveSqlTransaction(InvalidTransactionState, sqlstate="25P01"):
    """A statement that can only run inside a transaction block (25P01)."""


class InFailedTransaction(InvalidTransactionState, sqlstate="25P02"): ...


# ---- class 28 ----------------------------------------------------------------------------
InvalidAuthorization = InvalidAuthorizationSpecification


class AuthenticationFailed(InvalidAuthorizationSpecification, sqlstate="28P01"): ...


# ---- class 3B ----------------------------------------------------------------------------
class InvalidSavepointSpecification(SavepointException, sqlstate="3B001"): ...


# ---- class 3F ----------------------------------------------------------------------------
class InvalidSchemaName(DpsqlError, sqlstate="3F000"):
    """Class 3F: a schema that does not exist, or holds nothing to read (3F000
    invalid_schema_name)."""


# ---- class 42 ----------------------------------------------------------------------------
class PrivacyViolation(SyntaxErrorOrAccessRuleViolation, sqlstate="42501"):
    """Raw-row access, identifier use, an unbounded column (42501 insufficient_privilege)."""


class SqlSyntaxError(SyntaxErrorOrAccessRuleViolation, sqlstate="42601"):
    """The statement does not parse (42601)."""


class AmbiguousColumn(SyntaxErrorOrAccessRuleViolation, sqlstate="42702"): ...


class UndefinedColumn(SyntaxErrorOrAccessRuleViolation, sqlstate="42703"): ...


class UndefinedObject(SyntaxErrorOrAccessRuleViolation, sqlstate="42704"): ...


class UndefinedFunction(SyntaxErrorOrAccessRuleViolation, sqlstate="42883"):
    """A function PostgreSQL doesn't have for these argument types, e.g. avg(date) (42883)."""


class GroupingError(SyntaxErrorOrAccessRuleViolation, sqlstate="42803"):
    """A GROUP BY / GROUPING() misuse PostgreSQL would reject as well (42803)."""


class WrongObjectType(SyntaxErrorOrAccessRuleViolation, sqlstate="42809"):
    """An object used as what it is not, e.g. an ordered-set aggregate without WITHIN GROUP
    (42809)."""


class UndefinedTable(SyntaxErrorOrAccessRuleViolation, sqlstate="42P01"): ...


class UndefinedParameter(SyntaxErrorOrAccessRuleViolation, sqlstate="42P02"):
    """A ``$n`` placeholder without a value (``SELECT $1`` in a simple query)."""


class DuplicateCursor(SyntaxErrorOrAccessRuleViolation, sqlstate="42P03"):
    """A portal name already in use (42P03)."""


class DuplicatePreparedStatement(SyntaxErrorOrAccessRuleViolation, sqlstate="42P05"): ...


class DuplicateTable(SyntaxErrorOrAccessRuleViolation, sqlstate="42P07"):
    """A table that already exists (a release's ``--to-table`` without ``--replace``)."""


class InvalidColumnReference(SyntaxErrorOrAccessRuleViolation, sqlstate="42P10"): ...


class IndeterminateDatatype(SyntaxErrorOrAccessRuleViolation, sqlstate="42P18"):
    """A Parse parameter neither typed nor used (``SELECT $2`` without a type for ``$1``)."""


# ---- class 53 ----------------------------------------------------------------------------
class TooManyConnections(InsufficientResources, sqlstate="53300"): ...


class BudgetExhausted(InsufficientResources, sqlstate="53400"):
    """The release would exceed a privacy budget (53400 configuration_limit_exceeded)."""


# ---- class 54 ----------------------------------------------------------------------------
class StatementTooComplex(ProgramLimitExceeded, sqlstate="54001"):
    """A statement too large or too deeply nested for dpsql to rewrite (54001)."""


# ---- class 55 ----------------------------------------------------------------------------
class CantChangeRuntimeParam(ObjectNotInPrerequisiteState, sqlstate="55P02"):
    """A setting that cannot be changed now (55P02)."""


# ---- class 57 ----------------------------------------------------------------------------
class QueryCanceled(OperatorIntervention, sqlstate="57014"): ...


class AdminShutdown(OperatorIntervention, sqlstate="57P01"):
    """The server is shutting down (57P01): the session ends."""


class CannotConnectNow(OperatorIntervention, sqlstate="57P03"):
    """The server is starting or stopping and takes no new connection (57P03)."""


# ---- class 58 ----------------------------------------------------------------------------
class IoError(ExternalSystemError, sqlstate="58030"):
    """A file could not be written or read (58030 io_error)."""


class DuplicateFile(ExternalSystemError, sqlstate="58P02"):
    """A file to write exists already (58P02 duplicate_file)."""


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
