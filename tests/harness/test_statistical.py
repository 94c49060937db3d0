"""Statistical mode: the G-test has power where it should and holds its size under the null."""

import math

import numpy as np
import pytest
import torch

from framework.core.tree import CandidateTree
from harness.stats import cells, detectable_tv, g_test, power, sample_size_for_law, sample_size_for_tv
from verifiers import typical_verifier, verify

P = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
Q = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)
LAW = {0: 0.5, 1: 0.3, 2: 0.2}


def seed_example_first_tokens(n: int, seed: int, **kw) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    draft = torch.multinomial(Q.expand(n, 3), 1, replacement=True, generator=g)  # [n, 1]
    tree = CandidateTree.chain(draft, Q.expand(n, 2, 3), kind="iid")
    return verify(tree, P.expand(n, 2, 3), generator=g, **kw).tokens[:, 0]


def counts(tokens: torch.Tensor) -> dict[int, int]:
    return dict(enumerate(torch.bincount(tokens, minlength=3).tolist()))


def test_g_test_power_and_size():
    n = sample_size_for_tv(0.02)
    g = torch.Generator().manual_seed(0)
    exact = torch.multinomial(P, n, replacement=True, generator=g)
    shifted = torch.multinomial(P + torch.tensor([-0.02, 0.02, 0.0], dtype=torch.float64), n, replacement=True,
                                generator=g)
    assert g_test(counts(exact), LAW).passes()
    assert not g_test(counts(shifted), LAW).passes()
    assert g_test({3: 1, 0: 10}, LAW).p_value == 0.0  # an impossible outcome fails outright


def test_million_seed_example_verifications():
    n = 1_000_000
    assert g_test(counts(seed_example_first_tokens(n, 1)), LAW).passes()
    lossy = g_test(counts(seed_example_first_tokens(n, 1, verifier=typical_verifier())), LAW)
    assert not lossy.passes() and lossy.observed_tv > 0.1


def test_null_bracket():
    """The exact verifier is rejected at about the nominal rate (5% at alpha = 0.05)."""
    groups, per_group = 200, 5000
    tokens = seed_example_first_tokens(groups * per_group, 2).reshape(groups, per_group)
    rejections = sum(not g_test(counts(row), LAW).passes(alpha=0.05) for row in tokens)
    assert 1 <= rejections <= 22, rejections  # Binomial(200, 0.05): mean 10, sd 3.1


def test_detectable_tv_inverts_the_sample_size():
    for dof in (1, 50, 2000):
        for n in (256, 2500, 250_000):
            assert sample_size_for_tv(detectable_tv(n, dof), dof) in (n, n + 1)  # n + 1: the bisections' rounding
    assert detectable_tv(3) == math.inf  # three samples detect no possible error
    with pytest.raises(ValueError, match="at least one sample"):
        detectable_tv(0)


def test_power_is_what_the_noncentral_chi_square_says():
    """A law off by TV 0.05 over 244 cells (the least chi-square divergence that TV allows): the rejection rate of
    300 simulated tests matches the computed power, at the old N = 25 / TV^2 (power 0.81, not the claimed ~1) and
    at the N sized for power 0.9."""
    cells, delta = 244, 0.05
    law = {i: 1 / cells for i in range(cells)}
    off = np.array([(1 + 2 * delta * (1 if i % 2 == 0 else -1)) / cells for i in range(cells)])  # TV exactly delta
    rng = np.random.default_rng(0)
    for n in (25 * 400, sample_size_for_tv(delta, cells - 1)):
        rejected = np.mean([not g_test(dict(enumerate(rng.multinomial(n, off).tolist())), law).passes()
                            for _ in range(300)])
        assert abs(rejected - power(n, delta, cells - 1)) < 0.06, (n, rejected)  # sd of a rate over 300: <= 0.029
    assert power(25 * 400, delta, cells - 1) < 0.85 and sample_size_for_tv(delta, cells - 1) > 25 * 400


def test_sample_size_for_a_law_counts_the_cells_the_test_will_have():
    """Never fewer samples than the old 25 / TV^2; more where the test will have many cells."""
    few = {i: 0.5 ** (i + 1) for i in range(30)}
    few[30] = 1 - sum(few.values())
    n, dof = sample_size_for_law(few, 0.02)
    assert n == 25 * 2500 and dof == cells(few, n)[0] - 1 and power(n, 0.02, dof) >= 0.9
    many = {i: 1 / 1000 for i in range(1000)}
    n, dof = sample_size_for_law(many, 0.05)
    assert n > 25 * 400 and dof == 999 and power(n, 0.05, dof) >= 0.9 > power(n - 1000, 0.05, dof)
