"""pgcli in a pseudo-terminal against ``dpsql serve`` (the shared compat server, demo data).

pgcli (4.7) reads its completion metadata when it starts — schemas, tables, columns, types and
functions (``COALESCE(proallargtypes::regtype[], proargtypes::regtype[])::text[]``, which dpsql
refused) — and prints a traceback when a query fails. Properties: no traceback on screen or in
pgcli's log; Tab after ``FROM pu`` completes the private table's name and after ``WHERE ag`` a
column of it; hidden tables and columns are never offered; ``\\df`` and ``\\dT`` answer.
"""

from __future__ import annotations

import os
import re
import shutil
from pathlib import Path

from tests.compat.conftest import ANALYST, HIDDEN, PASSWORD, Server, require

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|\x1b[()][A-Z0-9]|\r")


def _screen(raw: str) -> str:
    return _ANSI.sub("", raw)


def test_pgcli_completion_in_a_pty(dpsql_server: Server, tmp_path: Path) -> None:
    require("pgcli")
    require("py:pexpect")
    import pexpect

    home = tmp_path / "home"
    home.mkdir()
    env = {**os.environ, "PGPASSWORD": PASSWORD, "TERM": "xterm", "HOME": str(home),
           "XDG_CONFIG_HOME": str(home / ".config"), "PAGER": "cat"}  # fmt: skip
    args = ["-h", dpsql_server.host, "-p", str(dpsql_server.port), "-U", ANALYST,
            "-d", dpsql_server.dbname, "--less-chatty"]  # fmt: skip
    pgcli = shutil.which("pgcli")
    assert pgcli is not None
    child = pexpect.spawn(pgcli, args, env=env, encoding="utf-8", timeout=60,
                          dimensions=(50, 220))  # fmt: skip
    seen: list[str] = []

    def until(pattern: str, timeout: float = 60) -> str:
        child.expect(pattern, timeout=timeout)
        seen.append(child.before + str(child.after))
        return _screen(child.before + str(child.after))

    try:
        until(rf"{re.escape(dpsql_server.dbname)}>")
        # completion metadata loads in the background: retry until the table is offered
        offered = ""
        for _ in range(12):
            child.send("SELECT COUNT(*) FROM pu\t")
            try:
                offered = until(r"pums", timeout=5)
                break
            except pexpect.TIMEOUT:
                child.send("\x03")
        assert "pums" in offered
        child.send("\x03")
        child.send("SELECT COUNT(*) FROM pums WHERE ag\t")
        assert "age" in until(r"age")
        child.send("\x03")
        child.send("SELECT COUNT(*) FROM pums WHERE \t")
        child.expect(r"income|married|educ")
        seen.append(child.before + str(child.after))
        child.send("\x03")
        # each command's own result line, then the prompt, before the next is typed: "concat_ws"
        # alone matched the echo of the typed command, so \dT was sent while \df still ran
        # (under load pgcli then answered neither within the minute)
        for command in ("\\df concat_ws", "\\dT"):
            child.sendline(command)
            until(r"\(\d+ rows?\)|SELECT \d+")
            until(rf"{re.escape(dpsql_server.dbname)}>")
        child.sendline("\\q")
        child.expect(pexpect.EOF)
        seen.append(child.before)
    finally:
        if child.isalive():
            child.terminate(force=True)
    screen = _screen("".join(seen))
    assert "Traceback" not in screen, screen[-3000:]
    assert not any(h in screen for h in HIDDEN), screen[-3000:]
    logs = [p for p in home.rglob("log") if p.is_file()]
    for log in logs:
        text = log.read_text(errors="replace")
        assert "Traceback" not in text and " ERROR " not in text, text[-3000:]
