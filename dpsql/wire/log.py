"""The structured per-statement log line and the literal-free statement fingerprint.

A fingerprint hashes the statement's tokens with every literal (strings, numbers, dollar-quoted
text) replaced by ``?``, so equal statements with different constants share it, and no value can be
recovered from it (hashing a literal would allow guessing it).

>>> fingerprint("SELECT count(*) FROM t WHERE age > 30") == fingerprint("select COUNT(*) from t where age > 31")
True
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Callable
from functools import lru_cache
from typing import Any, Literal

from sqlglot import TokenType
from sqlglot.dialects.postgres import Postgres

from dpsql.errors import DpsqlError
from dpsql.metrics import observe
from dpsql.sql.prescan import prescan
from dpsql.wire.parsing import LARGE_STATEMENT

log = logging.getLogger("dpsql.statement")
LINE_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"  # dpsql serve's log lines

_LITERALS = frozenset(
    {
        TokenType.STRING,
        TokenType.NUMBER,
        TokenType.BYTE_STRING,
        TokenType.HEREDOC_STRING,
        TokenType.NATIONAL_STRING,
        TokenType.RAW_STRING,
        TokenType.BIT_STRING,
        TokenType.HEX_STRING,
        TokenType.UNICODE_STRING,
    }
)
_DIALECT = Postgres()


def fingerprint(sql: str) -> str:
    """A 16-hex-digit hash of ``sql`` with literals removed and keywords case-folded.

    A large statement is not memoized (the memo would keep its text), and one over dpsql's
    statement limits (:mod:`dpsql.sql.prescan`) is never tokenized: all of them share one
    fingerprint.
    """
    if len(sql) <= LARGE_STATEMENT:
        return _fingerprint(sql)
    try:
        prescan(sql)
    except DpsqlError:
        return _OVER_LIMITS
    return _fingerprint.__wrapped__(sql)


@lru_cache(maxsize=4096)
def _fingerprint(sql: str) -> str:
    try:
        toks = _DIALECT.tokenize(sql)
        norm = " ".join("?" if t.token_type in _LITERALS else t.text.lower() for t in toks)
    except Exception:
        norm = "<untokenizable>"
    return hashlib.sha256(norm.encode("utf-8")).hexdigest()[:16]


_OVER_LIMITS = hashlib.sha256(b"<over the statement limits>").hexdigest()[:16]


def log_statement(**fields: Any) -> None:
    """Emit one JSON log line (analyst, fingerprint, outcome, epsilon, latency, ...).

    The same record and text as ``log.info(json.dumps(fields, default=str, separators=(",",
    ":")))``, made without walking the stack for the caller (it is always this function) and
    with the record's fixed attributes copied (:func:`_record`): this runs once per statement,
    on the server's event loop.
    """
    observe(fields)
    if log.isEnabledFor(logging.INFO):
        record = _record("".join(_chunks(fields, 0)) if _chunks is not None else _encode(fields))
        if log.filters or log.disabled:
            log.handle(record)
        else:  # what handle() does for a logger without filters, one call less
            log.callHandlers(record)


StatementText = Literal["text", "redacted", "none"]
STATEMENT_TEXT: StatementText = "redacted"
"""What the statement log holds of a statement's text (``dpsql serve --log-statements``):
``redacted`` (the default) with every literal replaced by ``?``, so the log holds no value an
analyst typed; ``text`` as sent; ``none`` (the fingerprint only)."""
MAX_LOGGED_TEXT = 10_000  # characters of a statement's text in its log line


def set_statement_text(mode: StatementText) -> None:
    global STATEMENT_TEXT
    STATEMENT_TEXT = mode


def statement_text(sql: str) -> str | None:
    """A statement's text for its log line, as :data:`STATEMENT_TEXT` says.

    >>> statement_text("SELECT a FROM t WHERE b = 'x' AND c > 3")
    'SELECT a FROM t WHERE b = ? AND c > ?'
    >>> set_statement_text("text"); statement_text("SELECT count(*) FROM t WHERE name = 'ann'")
    "SELECT count(*) FROM t WHERE name = 'ann'"
    >>> set_statement_text("redacted")
    """
    mode = STATEMENT_TEXT
    if mode == "none":
        return None
    if len(sql) > MAX_LOGGED_TEXT:
        sql = sql[:MAX_LOGGED_TEXT] + f"... ({len(sql)} characters)"
    if mode == "text":
        return sql
    return _redacted(sql) if len(sql) <= _MEMO_TEXT else _redact(sql)


_MEMO_TEXT = 4096  # a redacted text up to this long is kept (a prepared statement's, each run)


@lru_cache(maxsize=512)
def _redacted(sql: str) -> str:
    """:func:`_redact`, memoized: a function of the text alone."""
    return _redact(sql)


def _redact(sql: str) -> str:
    """``sql`` with every literal replaced by ``?``."""
    try:
        toks = _DIALECT.tokenize(sql)
    except Exception:
        return "<untokenizable>"
    out, pos = [], 0
    for t in toks:
        if t.token_type in _LITERALS:
            start = t.start
            while start > pos and sql[start - 1] in "'$Ee":  # the opening quote(s)
                start -= 1
            out.append(sql[pos:start] + "?")
            end = t.end + 1
            while end < len(sql) and sql[end] in "'$":
                end += 1
                if sql[end - 1] == "'":
                    break
            pos = end
    out.append(sql[pos:])
    return "".join(out)


_LINE = log_statement.__code__.co_firstlineno
# Per thread: the attributes of this function's records that do not change from one record to
# the next (path, function, thread, process...), as ``LogRecord.__init__`` sets them.
_FIXED: dict[int, dict[str, Any]] = {}
_VARYING = ("msg", "created", "msecs", "relativeCreated", "taskName")
_new_record = object.__new__
os.register_at_fork(after_in_child=_FIXED.clear)  # another pid (and process name)


def _record(msg: str) -> logging.LogRecord:
    """``log.makeRecord(...)`` for a statement line: equal attributes, less work per record
    (``LogRecord.__init__`` looks up the thread, process and file names each time).

    >>> r = _record("x")
    >>> ref = log.makeRecord(log.name, logging.INFO, __file__, _LINE, "x", (), None, "log_statement")
    >>> sorted(r.__dict__) == sorted(ref.__dict__) and r.process == ref.process
    True
    """
    if logging.getLogRecordFactory() is not logging.LogRecord:  # a custom factory decides
        return log.makeRecord(log.name, logging.INFO, __file__, _LINE, msg, (), None,
                              "log_statement")  # fmt: skip
    tid = threading.get_ident()
    fixed = _FIXED.get(tid)
    if fixed is None:
        ref = log.makeRecord(log.name, logging.INFO, __file__, _LINE, msg, (), None,
                             "log_statement")  # fmt: skip
        fixed = {k: v for k, v in ref.__dict__.items() if k not in _VARYING}
        if len(_FIXED) > 64:  # threads come and go (tests): keep a few
            _FIXED.clear()
        _FIXED[tid] = fixed
    rec: logging.LogRecord = _new_record(logging.LogRecord)
    d = rec.__dict__
    d.update(fixed)
    ct = time.time()
    d["msg"] = msg
    d["created"] = ct
    d["msecs"] = int((ct - int(ct)) * 1000) + 0.0  # as LogRecord (gh-89047)
    # logging's own start time, as LogRecord reads it (private: not in typeshed)
    d["relativeCreated"] = (ct - logging._startTime) * 1000  # type: ignore[attr-defined]
    if sys.version_info >= (3, 12):  # LogRecord.taskName: the running asyncio task's name
        d["taskName"] = _task_name()
    return rec


def _task_name() -> str | None:
    aio = sys.modules.get("asyncio")
    if aio is None or not getattr(logging, "logAsyncioTasks", True):
        return None
    try:
        task = aio.current_task()
    except Exception:
        return None
    return None if task is None else str(task.get_name())


_JSON = json.JSONEncoder(separators=(",", ":"), default=str)


def _c_encoder() -> Callable[[dict[str, Any], int], Any] | None:
    """The C encoder ``JSONEncoder.encode`` builds on every call, built once (no circular
    check: the fields are flat), or None without the C accelerator. ``"".join(enc(fields, 0))``
    is ``_JSON.encode(fields)``'s text."""
    make = getattr(json.encoder, "c_make_encoder", None)
    if make is None:
        return None
    enc: Callable[[dict[str, Any], int], Any] = make(
        None, str, json.encoder.encode_basestring_ascii, None, ":", ",", False, False, True
    )
    return enc


def _line_encoder() -> Callable[[dict[str, Any]], str]:
    """``_JSON.encode`` for a log line's fields: the C encoder ``JSONEncoder.encode`` builds on
    every call, built once (no circular check: the fields are flat). The same text.

    >>> from fractions import Fraction
    >>> f = {"a": "x\\u00e9\\"", "n": 1, "e": 0.1, "c": False, "s": None, "o": Fraction(1, 3)}
    >>> _line_encoder()(f) == _JSON.encode(f)
    True
    """
    enc = _c_encoder()
    if enc is None:  # no C accelerator: the standard path
        return _JSON.encode
    return lambda fields: "".join(enc(fields, 0))


_encode = _line_encoder()
_chunks = _c_encoder()  # log_statement joins its chunks itself: one Python call less


class LineFormatter(logging.Formatter):
    """``logging.Formatter(LINE_FORMAT)``'s text, made with less work per record.

    ``dpsql serve`` writes a line per statement, on the event loop. The date and time to the
    second are formatted once per second (cached as one tuple, so threads sharing the formatter
    never pair a second with another second's text) and only the milliseconds are appended; the
    line is one f-string instead of a %-format over the record's ``__dict__``. Records with an
    exception or a stack take the standard path (same text).

    >>> r = logging.makeLogRecord({"name": "dpsql.x", "msg": "hi %s", "args": ("you",),
    ...                            "levelname": "INFO", "created": 0.25, "msecs": 250.0})
    >>> LineFormatter().format(r) == logging.Formatter(LINE_FORMAT).format(r)
    True
    """

    def __init__(self) -> None:
        super().__init__(LINE_FORMAT)
        self._second: tuple[int, str] = (-1, "")

    def formatTime(self, record: logging.LogRecord, datefmt: str | None = None) -> str:
        if datefmt is not None:
            return super().formatTime(record, datefmt)
        sec = int(record.created)
        cached = self._second
        if cached[0] != sec:
            cached = (sec, time.strftime(self.default_time_format, self.converter(sec)))
            self._second = cached
        return f"{cached[1]},{int(record.msecs):03d}"

    def format(self, record: logging.LogRecord) -> str:
        if record.exc_info or record.exc_text or record.stack_info:
            return super().format(record)
        record.message = msg = record.getMessage()
        sec = int(record.created)  # formatTime(record), written out (one call less per line)
        cached = self._second
        if cached[0] != sec:
            cached = (sec, time.strftime(self.default_time_format, self.converter(sec)))
            self._second = cached
        record.asctime = stamp = f"{cached[1]},{int(record.msecs):03d}"
        return f"{stamp} {record.levelname} {record.name} {msg}"
