"""Statistical mode of the harness: is a sample consistent with a known law?

G-test (likelihood-ratio chi-square) on the joint law of the first D tokens. Cells whose
expected count is small are lumped into one, so the chi-square approximation holds.
Power: G is about N times the chi-square divergence, which is at least 4 delta^2 for a
total-variation error delta; N ~ 25 / delta^2 puts G near 100 above its null mean, far past
any critical value at a few dozen degrees of freedom (sample_size_for_tv).
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass
from typing import Hashable, Iterable, Mapping

from scipy import stats


def sample_size_for_tv(delta: float) -> int:
    """Samples needed to detect a total-variation error `delta`."""
    if not 0 < delta <= 1:
        raise ValueError(f"delta must be in (0, 1], got {delta}")
    return math.ceil(25 / delta**2)


def detectable_tv(n: int) -> float:
    """The total-variation error n samples detect: sample_size_for_tv's inverse (above 1 for n < 25:
    so few samples detect no possible error)."""
    if n < 1:
        raise ValueError(f"need at least one sample, got {n}")
    return 5 / math.sqrt(n)


@dataclass
class GTest:
    statistic: float
    dof: int
    p_value: float
    n: int
    observed_tv: float  # TV between the empirical law and the expected one (informative)

    def passes(self, alpha: float = 1e-3) -> bool:
        return self.p_value >= alpha


def g_test(samples: Iterable[Hashable] | Mapping[Hashable, int], law: Mapping[Hashable, float], min_expected: float = 5.0) -> GTest:
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
    return GTest(statistic, dof, float(stats.chi2.sf(statistic, dof)), n, observed_tv)
