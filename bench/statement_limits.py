"""Large and deeply nested statements against `dpsql serve` (issue #20, D1/D2): how long the
refusal or answer takes, how long another session's probes wait meanwhile, and the server's
resident size before and after.

    PYTHONPATH=. python bench/statement_limits.py

Prints one line per measurement; not part of pytest (timings on a shared machine vary).
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import psycopg

from dpsql.demo import POLICY, load_demo
from dpsql.execute.embedded import start_cluster

ROOT = Path(__file__).resolve().parents[1]


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def main() -> None:
    cluster = start_cluster()
    port_file = Path(tempfile.mkdtemp(prefix="dpsql-bench-")) / "port"
    proc = None
    try:
        with psycopg.connect(cluster.dsn(), autocommit=True) as c:
            c.execute("CREATE DATABASE demo")
        dsn = cluster.dsn("demo")
        load_demo(dsn)
        cmd = [sys.executable, "-m", "dpsql", "serve", "--policy", str(POLICY), "--upstream", dsn,
               "--listen", "127.0.0.1:0", "--port-file", str(port_file)]  # fmt: skip
        proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while not port_file.exists():
            time.sleep(0.05)
        port = int(port_file.read_text())
        url = f"host=127.0.0.1 port={port} user=analyst password=analyst dbname=demo"
        probes: list[float] = []
        done = threading.Event()

        def probe() -> None:
            with psycopg.connect(url, autocommit=True) as c:
                while not done.is_set():
                    t = time.perf_counter()
                    c.execute("SELECT code FROM regions WHERE code = 'N'").fetchone()
                    probes.append(time.perf_counter() - t)
                    time.sleep(0.01)

        values = ",".join(f"'{i:036d}'" for i in range(24_000))
        cases = {
            "2 MB SELECT 1+1+...": "SELECT " + "+".join(["1"] * 1_000_000),
            "5,000 nested parentheses": "SELECT " + "(" * 5000 + "1" + ")" * 5000,
            "960 KB public IN list (answered)": f"SELECT count(*) FROM regions WHERE code IN ('N', {values})",
        }  # fmt: skip
        print(f"rss at start: {rss_mb(proc.pid):.0f} MB")
        t = threading.Thread(target=probe)
        t.start()
        with psycopg.connect(url, autocommit=True) as conn:
            for name, sql in cases.items():
                for prepare in (False, True):
                    probes.clear()
                    t0 = time.perf_counter()
                    try:
                        conn.execute(sql, prepare=prepare).fetchall()
                        out = "answered"
                    except psycopg.Error as e:
                        out = str(e.sqlstate)
                    dt = time.perf_counter() - t0
                    worst = max(probes, default=float("nan"))
                    proto = "Parse" if prepare else "Query"
                    print(f"{name} ({proto}): {out} in {dt:.3f} s; probes {len(probes)}, "
                          f"slowest {worst * 1000:.0f} ms; rss {rss_mb(proc.pid):.0f} MB")  # fmt: skip
        done.set()
        t.join()
        print(f"rss at end: {rss_mb(proc.pid):.0f} MB")
    finally:
        if proc is not None:
            proc.terminate()
            proc.wait(30)
        cluster.stop()


if __name__ == "__main__":
    main()
