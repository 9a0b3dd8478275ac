"""Per-session state the wire session keeps itself: settings, privacy parameters, transactions.

Applying a :class:`~dpsql.wire.statements.SessionStatement` is pure: it changes this state and returns
an :class:`Outcome` (command tag, rows for SHOW, notices, ParameterStatus updates). No I/O here.
The settings themselves (their defaults, which are reported or read-only, how SET reads a value)
are :mod:`dpsql.wire.setting_values`.

Transactions: dpsql is read-only, so a transaction block only tracks status ('I' idle, 'T' in a block,
'E' failed) and undoes SET on ROLLBACK / ROLLBACK TO as PostgreSQL does. A DP release is charged
when it happens; rolling back never refunds budget.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, assert_never

from dpsql.errors import (
    ActiveSqlTransaction,
    CantChangeRuntimeParam,
    DpsqlError,
    InFailedTransaction,
    InvalidParameter,
    InvalidSavepointSpecification,
    NoActiveSqlTransaction,
    PrivacyViolation,
    UndefinedObject,
)
from dpsql.execute.privacy_params import check_epsilon, starting_values
from dpsql.policy.model import DPSQL_SETTINGS, Policy
from dpsql.result import ResultColumn
from dpsql.session import SessionContext
from dpsql.wire.setting_values import (
    CANON,
    DEFAULTS,
    READ_ONLY,
    REPORTED,
    canon,
    check_setting,
    isolation_level,
    read_bool,
    read_delta,
    read_fraction,
)
from dpsql.wire.statements import SessionStatement

TEXT_OID = 25
_PRIVACY = DPSQL_SETTINGS


@dataclass(frozen=True)
class Outcome:
    """What a session statement produced, for the session to send."""

    tag: str
    columns: tuple[ResultColumn, ...] = ()
    rows: list[tuple[Any, ...]] = field(default_factory=list)
    notices: tuple[tuple[str, str, str], ...] = ()  # (severity, sqlstate, message)
    parameter_status: tuple[tuple[str, str], ...] = ()
    discard_all: bool = False
    deallocate: str | None = None  # a statement name, or "" for ALL
    is_deallocate: bool = False


def _warning(cls: type[DpsqlError], msg: str) -> tuple[str, str, str]:
    """A WARNING notice with the SQLSTATE of ``cls`` (PostgreSQL warns, not errs, here)."""
    return ("WARNING", cls.sqlstate, msg)


def _set_local_outside() -> tuple[str, str, str]:
    return _warning(NoActiveSqlTransaction, "SET LOCAL can only be used in transaction blocks")


class SessionState:
    """Settings, privacy parameters and transaction status of one session."""

    def __init__(
        self,
        ctx: SessionContext,
        startup: dict[str, str],
        check_epsilon: Callable[[str, Fraction], None] | None = None,
        policy: Policy | None = None,
    ) -> None:
        """Args:
        ctx: the session's context (analyst and privacy settings), changed in place.
        startup: settings from the StartupMessage.
        check_epsilon: the engine's policy check of a per-query epsilon for an analyst
            (raises 22023), applied on ``SET dpsql.epsilon`` so a refused value never replaces
            the previous one; queries check again when they run.
        policy: where SHOW reads the value a dpsql setting the session has not set takes (the
            analyst's defaults, else the policy's); without one SHOW says ``default``.
        """
        self.ctx = ctx
        self._policy = policy
        self._check_epsilon = check_epsilon
        self.status = "I"
        self.settings: dict[str, str] = dict(DEFAULTS)
        for k, v in startup.items():
            key = canon(k)
            # a startup DateStyle (libpq's PGDATESTYLE) is checked as SET checks it: one
            # dpsql cannot honour refuses the connection instead of being dropped
            # (and a search_path: a connection for schema sales, PgJDBC's currentSchema, would
            # read public's tables silently)
            checked = key in ("DateStyle", "search_path", "standard_conforming_strings")
            self.settings[key] = check_setting(key, v) if checked else v
        self.settings["session_authorization"] = ctx.analyst
        self._initial = (dict(self.settings), self._privacy())
        self._begin: tuple[dict[str, str], tuple[Any, ...]] | None = None
        self._savepoints: list[tuple[str, tuple[dict[str, str], tuple[Any, ...]]]] = []
        self._local: dict[str, str] = {}  # SET LOCAL's settings: their values before the block
        self._local_privacy: dict[int, Any] = {}  # and dpsql settings' (index in _privacy())
        self.isolation: str | None = None  # the block's own level (BEGIN ISOLATION LEVEL ...)
        self._sync_ctx()

    def apply_startup(self, settings: tuple[tuple[str, str], ...]) -> None:
        """Settings the session starts with (the analyst's from the policy, then the client's
        ``options``), applied as SET would apply them and kept as the session's defaults (what
        RESET and DISCARD ALL return to).

        Raises:
            DpsqlError: an unknown ``dpsql.*`` setting (42704), a bad value (22023), a
                read-only setting (55P02): the connection is refused, never silently degraded.
        """
        for name, value in settings:
            if name.lower().startswith("dpsql."):
                self._set_privacy(name.lower(), value)
            else:
                self._do_set(SessionStatement("set", name, value, False))
        self._initial = (dict(self.settings), self._privacy())

    def start_zone(self, zone: str) -> None:
        """The session starts in time zone ``zone`` (the upstream's name for the one the
        client sent): set, and kept as the session's default (RESET, DISCARD ALL)."""
        self.settings["TimeZone"] = zone
        self._initial[0]["TimeZone"] = zone
        self._sync_ctx()

    # ---- snapshots -------------------------------------------------------------------------
    def _privacy(self) -> tuple[Any, ...]:
        c = self.ctx
        return (c.epsilon, c.delta, c.mechanism, c.confidence, c.show_intervals)

    def _snapshot(self) -> tuple[dict[str, str], tuple[Any, ...]]:
        return dict(self.settings), self._privacy()

    def _restore(self, snap: tuple[dict[str, str], tuple[Any, ...]]) -> tuple[tuple[str, str], ...]:
        settings, priv = snap
        changed = tuple(
            (k, settings[k]) for k in REPORTED if settings.get(k) != self.settings.get(k)
        )
        self.settings = dict(settings)
        c = self.ctx
        c.epsilon, c.delta, c.mechanism, c.confidence, c.show_intervals = priv
        self._sync_ctx()
        return changed

    def _sync_ctx(self) -> None:
        self.ctx.settings = {k: v for k, v in self.settings.items() if DEFAULTS.get(k) != v}

    # ---- transactions ----------------------------------------------------------------------
    def fail(self) -> None:
        """An error happened: a transaction block becomes failed ('E')."""
        if self.status == "T":
            self.status = "E"

    def check_not_failed(self) -> None:
        if self.status == "E":
            raise InFailedTransaction(
                "current transaction is aborted, commands ignored until end of transaction block",
                hint="send ROLLBACK (or ROLLBACK TO a savepoint)",
            )

    def apply(self, st: SessionStatement) -> Outcome:
        """Apply a session statement.

        Raises:
            DpsqlError: invalid value, unknown setting, no such savepoint, failed transaction.
        """
        if self.status == "E" and st.kind not in ("rollback", "rollback_to", "commit"):
            self.check_not_failed()
        match st.kind:
            case "set":
                return self._do_set(st)
            case "reset":
                return self._do_reset(st)
            case "show":
                return self._do_show(st)
            case "begin":
                return self._do_begin(st)
            case "commit":
                return self._do_commit(st)
            case "rollback":
                return self._do_rollback(st)
            case "rollback_to":
                return self._do_rollback_to(st)
            case "savepoint":
                return self._do_savepoint(st)
            case "release":
                return self._do_release(st)
            case "discard":
                return self._do_discard(st)
            case "deallocate":
                return self._do_deallocate(st)
            case "noop":
                return self._do_noop(st)
            case _:
                assert_never(st.kind)

    def _do_begin(self, st: SessionStatement) -> Outcome:
        if self.status != "I":
            return Outcome(
                "BEGIN",
                notices=(
                    _warning(ActiveSqlTransaction, "there is already a transaction in progress"),
                ),
            )
        level = None if st.value is None else isolation_level("transaction_isolation", st.value)
        self.status = "T"
        self._begin = self._snapshot()
        self._local, self._local_privacy = {}, {}
        self.isolation = level
        return Outcome("BEGIN")

    def _end(self, rollback: bool) -> tuple[tuple[str, str], ...]:
        changed: tuple[tuple[str, str], ...] = ()
        if rollback and self._begin is not None:
            changed = self._restore(self._begin)
        elif self._local or self._local_privacy:  # COMMIT: SET LOCAL ends with its block
            snap = dict(self.settings)
            snap.update(self._local)
            priv = list(self._privacy())
            for i, old in self._local_privacy.items():
                priv[i] = old
            changed = self._restore((snap, tuple(priv)))
        self.status, self._begin, self._savepoints = "I", None, []
        self._local, self._local_privacy = {}, {}
        self.isolation = None
        return changed

    def _do_commit(self, st: SessionStatement) -> Outcome:
        if self.status == "I":
            return Outcome(
                "COMMIT",
                notices=(_warning(NoActiveSqlTransaction, "there is no transaction in progress"),),
            )
        failed = self.status == "E"
        changed = self._end(rollback=failed)
        return Outcome("ROLLBACK" if failed else "COMMIT", parameter_status=changed)

    def _do_rollback(self, st: SessionStatement) -> Outcome:
        if self.status == "I":
            return Outcome(
                "ROLLBACK",
                notices=(_warning(NoActiveSqlTransaction, "there is no transaction in progress"),),
            )
        return Outcome("ROLLBACK", parameter_status=self._end(rollback=True))

    def _need_block(self, what: str) -> None:
        if self.status == "I":
            raise NoActiveSqlTransaction(f"{what} can only be used in transaction blocks",
                                         hint="start one with BEGIN")  # fmt: skip

    def _find(self, name: str) -> int:
        for i in range(len(self._savepoints) - 1, -1, -1):
            if self._savepoints[i][0] == name:
                return i
        raise InvalidSavepointSpecification(f'savepoint "{name}" does not exist',
                                            hint="check the savepoint's name")  # fmt: skip

    def _do_savepoint(self, st: SessionStatement) -> Outcome:
        self._need_block("SAVEPOINT")
        self._savepoints.append((st.name or "", self._snapshot()))
        return Outcome("SAVEPOINT")

    def _do_release(self, st: SessionStatement) -> Outcome:
        self._need_block("RELEASE SAVEPOINT")
        del self._savepoints[self._find(st.name or "") :]
        return Outcome("RELEASE")

    def _do_rollback_to(self, st: SessionStatement) -> Outcome:
        self._need_block("ROLLBACK TO SAVEPOINT")
        i = self._find(st.name or "")
        snap = self._savepoints[i][1]
        del self._savepoints[i + 1 :]
        self.status = "T"
        return Outcome("ROLLBACK", parameter_status=self._restore(snap))

    # ---- settings --------------------------------------------------------------------------
    def _do_noop(self, st: SessionStatement) -> Outcome:
        return Outcome(st.name or "SET")

    def _do_discard(self, st: SessionStatement) -> Outcome:
        if st.name != "all":
            return Outcome(f"DISCARD {(st.name or '').upper()}")
        if self.status != "I":
            raise ActiveSqlTransaction("DISCARD ALL cannot run inside a transaction block",
                                       hint="COMMIT or ROLLBACK first")  # fmt: skip
        changed = self._restore(self._initial)
        return Outcome("DISCARD ALL", parameter_status=changed, discard_all=True)

    def _do_deallocate(self, st: SessionStatement) -> Outcome:
        return Outcome("DEALLOCATE ALL" if st.name is None else "DEALLOCATE",
                       deallocate=st.name or "", is_deallocate=True)  # fmt: skip

    def _do_reset(self, st: SessionStatement) -> Outcome:
        if st.name is None:
            init_settings, init_priv = self._initial
            keep = {k: self.settings[k] for k in READ_ONLY if k in self.settings}
            changed = self._restore(({**init_settings, **keep}, init_priv))
            return Outcome("RESET", parameter_status=changed)
        return self._do_set(SessionStatement("set", st.name, None, st.local), tag="RESET")

    def _do_set(self, st: SessionStatement, tag: str = "SET") -> Outcome:
        """SET / RESET of one setting, ``dpsql.*`` ones included, with PostgreSQL's scoping:
        SET LOCAL lasts until the block ends (COMMIT too) and outside a block only warns
        (25P01) and changes nothing; any SET in a block is undone by its ROLLBACK."""
        name = st.name or ""
        if name.startswith("dpsql."):
            before = self._privacy()
            if st.value is None and name in _PRIVACY:  # RESET: the session's starting value
                self._set_privacy(name, self._starting_privacy(name))
            else:
                self._set_privacy(name, st.value)
            i = _PRIVACY.index(name)
            if st.local and self.status == "I":  # checked (a bad value errs), then no effect
                self._restore((dict(self.settings), before))
                return Outcome(tag, notices=(_set_local_outside(),))
            if st.local:
                self._local_privacy.setdefault(i, before[i])
            elif i in self._local_privacy:  # a plain SET after SET LOCAL outlives the block
                self._local_privacy[i] = self._privacy()[i]
            return Outcome(tag)
        key = canon(name)
        if key == "transaction_isolation":  # SET TRANSACTION ISOLATION LEVEL: this block only
            level = isolation_level(key, st.value or self.settings["default_transaction_isolation"])
            if self.status == "I":
                return Outcome(tag, notices=(_warning(NoActiveSqlTransaction,
                               "SET TRANSACTION can only be used in transaction blocks"),))  # fmt: skip
            self.isolation = level
            return Outcome(tag)
        if key in READ_ONLY:
            raise CantChangeRuntimeParam(f'parameter "{name}" cannot be changed',
                                         hint="it is fixed by the server")  # fmt: skip
        if key in ("role", "session_authorization"):
            raise PrivacyViolation("changing the role is not allowed through dpsql",
                                   hint="connect as the analyst you want to be")  # fmt: skip
        value = self._initial[0].get(key, "") if st.value is None else check_setting(key, st.value)
        if st.local:
            if self.status == "I":
                return Outcome(tag, notices=(_set_local_outside(),))
            self._local.setdefault(key, self.settings.get(key, ""))
        elif key in self._local:  # a plain SET after SET LOCAL outlives the block
            self._local[key] = value
        old = self.settings.get(key)
        self.settings[key] = value
        self._sync_ctx()
        report = ((key, value),) if key in REPORTED and old != value else ()
        return Outcome(tag, parameter_status=report)

    def _set_privacy(self, name: str, value: str | None) -> None:
        c = self.ctx
        if name == "dpsql.epsilon":
            eps = None if value is None else read_fraction(name, value, lo=None)
            if eps is not None and self._policy is not None:  # one range, the policy's
                check_epsilon(self._policy, c.analyst, eps, value or "")
            elif eps is not None and self._check_epsilon is not None:
                self._check_epsilon(c.analyst, eps)
            elif eps is not None:
                read_fraction(name, value or "", lo=0, lo_open=True)
            c.epsilon = eps
        elif name == "dpsql.delta":
            # checked now against the range every statement takes, as PostgreSQL checks its
            # settings at SET (was: accepted, then every private statement refused it)
            c.delta = None if value is None else read_delta(name, value)
        elif name == "dpsql.mechanism":
            v = (value or "auto").lower()
            if v not in ("auto", "laplace", "gaussian"):
                raise InvalidParameter(f'invalid value for parameter "dpsql.mechanism": "{value}"',
                                       hint="use auto, laplace or gaussian")  # fmt: skip
            c.mechanism = v
        elif name == "dpsql.confidence":
            c.confidence = (
                None
                if value is None
                else float(read_fraction(name, value, lo=0, hi=1, lo_open=True))
            )
        elif name == "dpsql.show_intervals":
            c.show_intervals = False if value is None else read_bool(name, value)
        else:
            raise UndefinedObject(f'unrecognized configuration parameter "{name}"',
                                  hint=_UNKNOWN_HINT)  # fmt: skip

    def _do_show(self, st: SessionStatement) -> Outcome:
        name = st.name or ""
        if name == "all":
            rows = [
                (k, v, "") for k, v in sorted(self.settings.items(), key=lambda kv: kv[0].lower())
            ]
            rows += [(p, self.show_privacy(p), "") for p in _PRIVACY]
            cols = tuple(ResultColumn(n, TEXT_OID) for n in ("name", "setting", "description"))
            return Outcome("SHOW", cols, rows)
        if name.startswith("dpsql."):
            value = self.show_privacy(name)
        else:
            key = canon(name)
            if key not in self.settings:
                raise UndefinedObject(f'unrecognized configuration parameter "{name}"',
                                      hint="SHOW ALL lists the parameters dpsql knows")  # fmt: skip
            value = self.settings[key]
            if key == "transaction_isolation":  # the block's level, else the default's
                value = self.isolation or self.settings["default_transaction_isolation"]
        col_name = CANON.get(name.lower(), name).lower() if not name.startswith("dpsql.") else name
        return Outcome("SHOW", (ResultColumn(col_name, TEXT_OID),), [(value,)])

    def _starting_privacy(self, name: str) -> str | None:
        """A dpsql setting's value at session start (policy, options) as SET would take it,
        None for the policy's default."""
        value = dict(zip(_PRIVACY, self._initial[1], strict=True))[name]
        if value is None:
            return None
        if isinstance(value, bool):
            return "on" if value else "off"
        return str(value)

    def show_privacy(self, name: str) -> str:
        c = self.ctx
        values: dict[str, Any] = {
            "dpsql.epsilon": c.epsilon, "dpsql.delta": c.delta, "dpsql.mechanism": c.mechanism,
            "dpsql.confidence": c.confidence,
            "dpsql.show_intervals": "on" if c.show_intervals else "off",
        }  # fmt: skip
        if name not in values:
            raise UndefinedObject(f'unrecognized configuration parameter "{name}"',
                                  hint=_UNKNOWN_HINT)  # fmt: skip
        v = values[name]
        if v is None and self._policy is not None:
            v = starting_values(self._policy, c.analyst).get(name)
        if v is None:
            return "default"
        if isinstance(v, Fraction):
            return str(float(v)) if v.denominator != 1 else str(v.numerator)
        return str(v)


_UNKNOWN_HINT = (
    "dpsql settings: " + ", ".join(_PRIVACY) + "; what is left of your budget: SHOW "
    "dpsql.budget; what you spent: SELECT * FROM dpsql.history"
)
