"""Sampler throughput: a million draws of each exact sampler (dpsql.dp.rng), CPU seconds.

Was a pytest speed check (< 2 s of process CPU); speed lives here now. Prints the machine's load
beside the numbers.

    python bench/samplers.py
"""

from __future__ import annotations

import os
import time
from fractions import Fraction

from dpsql.dp import rng


def main() -> None:
    print(f"load average {os.getloadavg()[0]:.2f}, {os.cpu_count()} cores")
    rng.discrete_laplace(Fraction(3), 10)  # warm-up
    for name, fn, arg in (
        ("discrete_laplace(scale 1000)", rng.discrete_laplace, Fraction(1000)),
        ("discrete_gaussian(sigma2 1e6)", rng.discrete_gaussian, Fraction(10**6)),
    ):
        t0 = time.process_time()
        fn(arg, 1_000_000)
        print(f"{name:32s} 1e6 draws: {time.process_time() - t0:.2f} s CPU")


if __name__ == "__main__":
    main()
