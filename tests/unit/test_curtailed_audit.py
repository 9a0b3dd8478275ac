"""The curtailed audit (tests/dp_audit/auditing.py: ``curtailed_audit``) reaches the full audit's
verdict: for outcome sequences of correct and broken mechanisms alike, stopping once the runs
left cannot change the verdict gives the verdict of counting every run (so the end-to-end
audits that use it keep their false-failure probability and their power on broken twins)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.dp_audit.auditing import curtailed_audit, epsilon_lower_bound


def _full(seq_d: np.ndarray, seq_d2: np.ndarray, claimed: float, alpha: float) -> bool:
    n = len(seq_d)
    a, b = int(seq_d.sum()), int(seq_d2.sum())
    bound = max(
        epsilon_lower_bound(a, n, b, n, alpha=alpha), epsilon_lower_bound(b, n, a, n, alpha=alpha)
    )
    return bound > claimed


@pytest.mark.parametrize("runs", [1, 7, 100])
def test_the_verdict_is_the_full_audits(runs: int) -> None:
    rng = np.random.default_rng(20)
    stopped_early, verdicts = 0, set()
    # event rates on (D, D'): correct mechanisms (ratio <= e), broken ones, no noise at all
    for p_d, p_d2 in [(0.18, 0.5), (0.09, 0.25), (0.5, 0.5), (0.02, 0.6), (0.0, 1.0), (0.3, 0.9)]:
        for _ in range(8):
            seq = [rng.random(runs) < p_d, rng.random(runs) < p_d2]
            drawn = [0, 0]

            def event(i: int, seq: list[np.ndarray] = seq, drawn: list[int] = drawn) -> bool:
                drawn[i] += 1
                return bool(seq[i][drawn[i] - 1])

            v = curtailed_audit(event, runs, 1.0, alpha=5e-7)
            assert v.exceeds == _full(seq[0], seq[1], 1.0, 5e-7), (p_d, p_d2, seq)
            assert drawn == [v.used, v.used] and v.hits == (
                int(seq[0][: v.used].sum()),
                int(seq[1][: v.used].sum()),
            )
            stopped_early += v.used < runs
            verdicts.add(v.exceeds)
    if runs == 100:
        assert stopped_early > 40  # of 48: the point of it
        assert verdicts == {False, True}  # both kinds of sequence were there


def test_a_deterministic_leak_is_flagged_early() -> None:
    """No noise (the event always on D', never on D): flagged, well before 100 runs a side."""
    v = curtailed_audit(lambda i: i == 1, 100, 1.0, alpha=5e-7)
    assert v.exceeds and v.used < 100 and v.hits == (0, v.used)
