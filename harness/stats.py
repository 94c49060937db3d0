"""Statistical mode of the harness: is a sample consistent with a known law?

G-test (likelihood-ratio chi-square) on the joint law of the first D tokens. Cells whose
expected count is small are lumped into one, so the chi-square approximation holds.

Power: under an error of total variation delta, G is about a noncentral chi-square with the test's
degrees of freedom k and noncentrality N chi2(true || reference) >= 4 N delta^2 (Cauchy-Schwarz: the
smallest chi-square divergence a TV of delta allows). So the power to detect delta at level alpha is at
least P(ncx2(k, 4 N delta^2) > its critical value), and it falls as k grows: the old rule N = 25 / delta^2
detects delta with probability 0.1-0.8 at 243-6,506 degrees of freedom. Samples are sized by that bound
at the actual k (sample_size_for_tv, sample_size_for_law), and each test reports its power (GTest.power).
The power is the power against a TV error between the laws as the test sees them: on its cells, the rare
outcomes pooled into one. An error that moves mass only among the pooled outcomes (reference mass m) is not
seen; the rows report m beside the power (GTest.lumped).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping

from scipy import stats

ALPHA, POWER = 1e-3, 0.9  # the level the checks test at, and the power they are sized for


def power(n: int, delta: float, dof: int, alpha: float = ALPHA) -> float:
    """The least probability that a G-test of n samples at level alpha with `dof` degrees of freedom rejects a
    law off by total variation `delta` (the noncentral chi-square at noncentrality 4 n delta^2)."""
    critical = stats.chi2.isf(alpha, dof)
    return float(stats.ncx2.sf(critical, dof, 4 * n * delta**2))


def sample_size_for_tv(delta: float, dof: int = 1, alpha: float = ALPHA, target_power: float = POWER) -> int:
    """The fewest samples whose G-test at `dof` degrees of freedom detects a TV error `delta` with `target_power`."""
    if not 0 < delta <= 1:
        raise ValueError(f"delta must be in (0, 1], got {delta}")
    if dof < 1:
        raise ValueError(f"dof must be >= 1, got {dof}")
    lo, hi = 1, 2
    while power(hi, delta, dof, alpha) < target_power:
        lo, hi = hi, hi * 2
    while hi - lo > 1:  # power grows with n: bisect
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if power(mid, delta, dof, alpha) < target_power else (lo, mid)
    return hi


def detectable_tv(n: int, dof: int = 1, alpha: float = ALPHA, target_power: float = POWER) -> float:
    """The smallest TV error that n samples detect with `target_power` at `dof` degrees of freedom (above 1: none)."""
    if n < 1:
        raise ValueError(f"need at least one sample, got {n}")
    lo, hi = 0.0, 1.0
    if power(n, hi, dof, alpha) < target_power:
        return math.inf
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if power(n, mid, dof, alpha) < target_power else (lo, mid)
    return hi


def cells(law: Mapping[Hashable, float], n: int, min_expected: float = 5.0) -> tuple[int, float]:
    """(cells, lumped mass) of g_test for `law` at n samples: those expected min_expected times, one for the rest."""
    kept = [p for p in law.values() if n * p >= min_expected]
    lumped = max(0.0, 1.0 - sum(kept))
    return len(kept) + (len(kept) < len(law)), lumped


def sample_size_for_law(law: Mapping[Hashable, float], delta: float, alpha: float = ALPHA,
                        target_power: float = POWER) -> tuple[int, int]:
    """(n, dof): samples that detect a TV error `delta` on the test's cells with `target_power`, at the degrees
    of freedom the test will have at that n (more samples keep more cells apart: the two are found together).
    The search starts at the old rule's 25 / delta^2: fewer samples would see the law through a few cells only
    (at N = 523 the first three tokens of a vocabulary-64 model make two)."""
    n = max(math.ceil(25 / delta**2), sample_size_for_tv(delta, 1, alpha, target_power))
    for _ in range(200):
        dof = max(cells(law, n)[0] - 1, 1)
        needed = sample_size_for_tv(delta, dof, alpha, target_power)
        if needed <= n:
            return n, dof
        n = needed
    raise ValueError(f"no sample size up to {n} detects TV {delta} against this law")


@dataclass
class GTest:
    statistic: float
    dof: int
    p_value: float
    n: int
    observed_tv: float  # TV between the empirical law and the expected one (informative)
    lumped: float = 0.0  # the reference's mass pooled into one cell: an error moving mass only within it is not seen

    def passes(self, alpha: float = ALPHA) -> bool:
        return self.p_value >= alpha

    def power(self, delta: float, alpha: float = ALPHA) -> float:
        """The least chance this test had of rejecting a law off by TV `delta` on its cells, at its n and dof."""
        return power(self.n, delta, max(self.dof, 1), alpha)

    def detectable_tv(self, alpha: float = ALPHA) -> float:
        """The TV error on its cells this test detects with probability POWER at its n and dof."""
        return detectable_tv(self.n, max(self.dof, 1), alpha)


def g_test(samples: Iterable[Hashable] | Mapping[Hashable, int], law: Mapping[Hashable, float],
           min_expected: float = 5.0) -> GTest:
    """Test observed outcomes (or their counts) against `law` (outcome -> probability).

    An outcome the law gives probability 0 fails outright (p-value 0).
    """
    counts = Counter(samples) if not isinstance(samples, Mapping) else Counter(dict(samples))
    n = sum(counts.values())
    if n == 0:
        raise ValueError("g_test needs at least one sample")
    total = sum(law.values())
    if abs(total - 1) > 1e-6:
        raise ValueError(f"the reference law sums to {total}, not 1")
    impossible = [k for k in counts if law.get(k, 0.0) <= 0]
    observed_tv = 0.5 * sum(abs(counts.get(k, 0) / n - law.get(k, 0.0)) for k in set(counts) | set(law))
    if impossible:
        return GTest(math.inf, 0, 0.0, n, observed_tv)
    cells, lumped_obs, lumped_exp = [], 0, 0.0
    for k, prob in law.items():
        expected = n * prob
        if expected >= min_expected:
            cells.append((counts.get(k, 0), expected))
        else:
            lumped_obs += counts.get(k, 0)
            lumped_exp += expected
    if lumped_exp > 0:
        cells.append((lumped_obs, lumped_exp))
    statistic = 2 * sum(o * math.log(o / e) for o, e in cells if o > 0)
    dof = max(len(cells) - 1, 1)
    return GTest(statistic, dof, float(stats.chi2.sf(statistic, dof)), n, observed_tv, lumped_exp / n)
