"""A client that goes away is noticed by the channel as it happens (dpsql.wire.conn.Channel.on_eof),
also when the EOF arrives with the statement, before it starts: the statement is cancelled within
seconds (its log line says 57014), not left running until the statement timeout (30 s here)."""

from __future__ import annotations

import json
import logging
import socket
import time
from typing import Any

import psycopg
import pytest

from dpsql.wire import messages as m
from tests.helpers import analyst_dsn, served_engine
from tests.wire_support import RawClient


def test_query_sent_then_gone_at_once_is_cancelled(
    demo_dsn: str, demo_policy: Any, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="dpsql.statement")
    with served_engine(demo_policy, demo_dsn) as srv:
        for n in range(2):
            c = RawClient(srv.port)
            c.login("analyst", "analyst")
            c.send(m.Query("SELECT count(*) FROM generate_series(1, 1999999973)"))
            c.sock.shutdown(socket.SHUT_RDWR)  # with the query: EOF may be read first
            c.close()
            deadline = time.monotonic() + 30  # generous: a loaded 2-core machine
            while True:
                lines = [json.loads(r.getMessage()) for r in caplog.records
                         if r.name == "dpsql.statement"]  # fmt: skip
                if sum(x["outcome"] == "57014" for x in lines) > n:
                    break
                assert time.monotonic() < deadline, f"not cancelled: {lines}"
                time.sleep(0.1)
        with psycopg.connect(analyst_dsn(srv.port), autocommit=True) as conn:
            assert conn.execute("SELECT code FROM regions WHERE code = %s", ("S",)).fetchone()
