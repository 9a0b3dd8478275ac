"""Microbenchmark: the per-statement log line (dpsql.wire.log.log_statement) as ``dpsql serve``
writes it (root StreamHandler, to /dev/null here), before (the standard Formatter(LINE_FORMAT),
JSONEncoder.encode), with LineFormatter, and after (LineFormatter and the encoder built once);
also the formatter alone. Both are measured interleaved in one process,
best of several rounds, so machine load affects them alike. The text is checked to be equal.

    python bench/log_statement.py [rounds]
"""

from __future__ import annotations

import logging
import os
import sys
import time

sys.path.insert(0, os.getcwd())

from dpsql.wire import log as wire_log

FIELDS = {"analyst": "analyst", "session": 123456, "fingerprint": "0123456789abcdef",
          "kind": "public", "outcome": "SELECT 1", "epsilon": 0.0, "delta": 0.0,
          "cached": False, "rows": 1, "latency_ms": 0.412}  # fmt: skip
N = 20000


def _per_call_us(fn: object, n: int = N) -> float:
    call = fn  # type: ignore[assignment]
    t0 = time.perf_counter()
    for _ in range(n):
        call()  # type: ignore[operator]
    return (time.perf_counter() - t0) / n * 1e6


def main(rounds: int = 15) -> None:
    root = logging.getLogger()
    for h in list(root.handlers):
        root.removeHandler(h)
    root.setLevel(logging.INFO)
    handler = logging.StreamHandler(open(os.devnull, "w"))
    root.addHandler(handler)
    variants = {  # name: (formatter, JSON encode)
        "before": (logging.Formatter(wire_log.LINE_FORMAT), wire_log._JSON.encode),
        "after": (wire_log.LineFormatter(), wire_log._JSON.encode),
    }
    rec = wire_log.log.makeRecord("dpsql.statement", logging.INFO, __file__, 1,
                                  wire_log._JSON.encode(FIELDS), (), None)  # fmt: skip
    texts = {k: f.format(rec) for k, (f, _) in variants.items()}
    assert len(set(texts.values())) == 1, texts
    best: dict[str, list[float]] = {k: [1e9, 1e9] for k in variants}
    for _ in range(rounds):
        for name, (fmt, encode) in variants.items():
            handler.setFormatter(fmt)
            wire_log._encode = encode  # type: ignore[assignment]
            line = _per_call_us(lambda: wire_log.log_statement(**FIELDS))
            alone = _per_call_us(lambda fmt=fmt: fmt.format(rec))
            best[name] = [min(best[name][0], line), min(best[name][1], alone)]
    for name, (line, alone) in best.items():
        print(f"{name:>13}: log_statement {line:6.2f} us, format() alone {alone:5.2f} us")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 15)
