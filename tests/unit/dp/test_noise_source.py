"""The noise source seam (dpsql/dp/noise_source.py): the product has one source, it samples.

* Structure: the only classes in ``dpsql/`` that implement the source's five methods are the
  :class:`NoiseSource` protocol and :class:`CsprngNoise`; nothing in ``dpsql/`` builds an engine
  with another source (``Engine(noise=...)``), and the engine's default is :data:`CSPRNG`. So no
  CLI flag, ``dpsql serve`` option or policy setting can reach a zero-noise source: it lives in
  tests/helpers.py. The scan is checked on a product with a planted zero-noise class (caught).
* Each method of :data:`CSPRNG` draws its mechanism's randomness: on inputs where the exact
  answer (tests.helpers.EXACT) is one fixed value and the mechanism's output is not, the draws
  differ from it. False-failure probabilities are stated per test (each <= 1e-9); the same check
  run on EXACT (a source that adds nothing) fails, so the check has teeth.
"""

from __future__ import annotations

import ast
import functools
import inspect
from fractions import Fraction

import numpy as np

from dpsql.dp.bounds import TopRank
from dpsql.dp.mechanisms import Gaussian, Laplace
from dpsql.dp.noise_source import CSPRNG, CsprngNoise, NoiseSource
from dpsql.dp.partition import PartitionSelection
from dpsql.dp.quantiles import Mode, Quantile
from dpsql.engine import Engine
from tests.helpers import EXACT, ROOT

METHODS = {"add", "keep", "pick", "mode", "bound"}


def _sources(files: dict[str, str]) -> set[str]:
    """``path:Class`` of every class defining all of the source's methods, and ``path:line`` of
    every ``Engine(..., noise=...)`` call (files: path -> Python source)."""
    return set().union(*(_file_sources(path, text) for path, text in files.items()))


@functools.cache
def _file_sources(path: str, text: str) -> frozenset[str]:
    """:func:`_sources` of one file (cached by its text: the product is scanned three times,
    with and without the planted files, and parsing its ~260 files was most of the tests' CPU)."""
    found = set()
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef):
            names = {f.name for f in node.body if isinstance(f, ast.FunctionDef)}
            if METHODS <= names:
                found.add(f"{path}:{node.name}")
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Name)
            and node.func.id == "Engine"
            and any(k.arg == "noise" for k in node.keywords)
        ):
            found.add(f"{path}:{node.lineno}")
    return frozenset(found)


def _product() -> dict[str, str]:
    return {str(p.relative_to(ROOT)): p.read_text() for p in sorted((ROOT / "dpsql").rglob("*.py"))}


def test_the_product_has_one_noise_source_and_engines_use_it() -> None:
    want = {"dpsql/dp/noise_source.py:NoiseSource", "dpsql/dp/noise_source.py:CsprngNoise"}
    assert _sources(_product()) == want
    assert inspect.signature(Engine).parameters["noise"].default is CSPRNG
    assert isinstance(CSPRNG, CsprngNoise)


def test_a_planted_zero_noise_source_or_engine_is_caught() -> None:
    planted = inspect.getsource(type(EXACT))  # tests.helpers.ExactNoise, copied into dpsql/
    product = _product()
    product["dpsql/dp/zero.py"] = planted
    product["dpsql/cli_extra.py"] = "e = Engine(policy, dsn, noise=ZERO)\n"
    extra = _sources(product) - _sources(_product())
    assert extra == {"dpsql/dp/zero.py:ExactNoise", "dpsql/cli_extra.py:1"}


def _differs(source: NoiseSource) -> dict[str, bool]:
    """Per method: whether ``source``'s draws differ from the exact answer where the mechanism's
    output is random. On CSPRNG each is False with probability <= 1e-9 (stated per line)."""
    out = {}
    zeros = np.zeros(200)
    # discrete Laplace of scale 10: P(noise = 0) = (1 - r) / (1 + r) < 0.05, r = exp(-1/10);
    # all 200 zero: < 0.05**200
    out["add_laplace"] = bool((source.add(Laplace(Fraction(1), Fraction(1, 10)), zeros) != 0).any())
    # discrete Gaussian of sigma 10: P(0) < 0.04; all 200 zero: < 0.04**200
    gauss = Gaussian(Fraction(1), Fraction(1, 200))
    out["add_gaussian"] = bool((source.add(gauss, zeros) != 0).any())
    # 100 groups of one unit against a threshold for delta = 1e-11: P(any kept) <= 1e-9;
    # the exact answer keeps every group with a unit
    sel = PartitionSelection(Fraction(1), Fraction(1, 10**11), 1)
    out["keep"] = not bool(source.keep(sel, np.ones(100)).all())
    # equal utilities over 10 candidates: permute-and-flip is uniform, the exact answer is the
    # first; all 200 groups on the first: 0.1**200
    q = Quantile(Fraction(1, 2), Fraction(1), Fraction(0), Fraction(10), 10)
    out["pick"] = bool((source.pick(q, np.zeros((200, 10), dtype=np.int64)) != 0).any())
    # equal counts over 5 candidates: uniform; all 200 on the first: 0.2**200
    out["mode"] = bool(
        (source.mode(Mode(Fraction(1)), np.zeros((200, 5), dtype=np.int64)) != 0).any()
    )
    # one unit per bucket over 300 buckets, epsilon 1: the guard passes (noisy count of 300 >=
    # its limit of 129) except with probability < exp(-17); the best bucket's left neighbour is
    # one unit (4 quarters) further from the target, heads with probability exp(-0.9 * 4 / 8) >
    # 0.63, and then the best is picked with probability <= 1/2: P(best) <= 0.69 per draw; 60
    # draws all on the exact bucket: <= 0.69**60 + 60 exp(-17) < 1e-9
    top, counts = TopRank(Fraction(1), 22), np.ones(300, dtype=np.int64)
    best = EXACT.bound(top, counts)
    out["bound"] = any(source.bound(top, counts) != best for _ in range(60))
    return out


def test_the_product_source_draws_every_mechanisms_noise() -> None:
    got = _differs(CSPRNG)
    assert all(got.values()), got


def test_the_check_catches_a_source_that_adds_nothing() -> None:
    assert not any(_differs(EXACT).values())
