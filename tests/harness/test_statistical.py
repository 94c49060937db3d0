"""Statistical mode: the G-test has power where it should and holds its size under the null."""

import pytest
import torch

from framework import CandidateTree
from framework.harness.stats import detectable_tv, g_test, sample_size_for_tv
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
    shifted = torch.multinomial(P + torch.tensor([-0.02, 0.02, 0.0], dtype=torch.float64), n, replacement=True, generator=g)
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
    for n in (25, 256, 2500, 250_000):  # from 25 up: fewer samples detect no TV <= 1
        assert sample_size_for_tv(detectable_tv(n)) in (n, n + 1)  # n + 1: float rounding of 25 / tv^2
    with pytest.raises(ValueError, match="at least one sample"):
        detectable_tv(0)
