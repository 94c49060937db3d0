"""The distillation losses on laws whose values are known by hand."""

import math

import pytest
import torch

from framework.training.losses import KL, CrossEntropy, Hybrid, LogAcceptance, TotalVariation, acceptance

P = torch.tensor([[0.5, 0.3, 0.2]])
Q = torch.tensor([[0.2, 0.3, 0.5]])
LABELS = torch.tensor([1])


def losses_of(p, q):
    return {name: float(loss(q.log(), p.log(), LABELS)) for name, loss in
            {"kl": KL(), "tv": TotalVariation(), "lk": LogAcceptance(), "ce": CrossEntropy()}.items()}


def test_values_by_hand():
    got = losses_of(P, Q)
    assert got["kl"] == pytest.approx(0.5 * math.log(0.5 / 0.2) + 0.2 * math.log(0.2 / 0.5))
    assert float(acceptance(Q.log(), P.log())) == pytest.approx(0.2 + 0.3 + 0.2)  # sum of min(p, q)
    assert got["tv"] == pytest.approx(0.3)  # half the L1 distance: 0.5 * (0.3 + 0 + 0.3)
    assert got["lk"] == pytest.approx(-math.log(0.7))
    assert got["ce"] == pytest.approx(-math.log(0.3))


def test_every_acceptance_loss_is_zero_at_the_target_law():
    got = losses_of(P, P)
    assert got["kl"] == pytest.approx(0, abs=1e-7) and got["tv"] == pytest.approx(0, abs=1e-7)
    assert got["lk"] == pytest.approx(0, abs=1e-7)


def test_disjoint_laws_keep_finite_loss_and_gradient():
    q = torch.tensor([[0.0, 30.0, -30.0]], requires_grad=True)  # all mass on token 1; p has none there
    p = torch.tensor([[0.5, 0.0, 0.5]]).clamp_min(1e-30).log()
    loss = LogAcceptance()(q.log_softmax(-1), p, LABELS).sum()
    loss.backward()
    assert math.isfinite(float(loss)) and torch.isfinite(q.grad).all()


def test_lk_gradient_is_tv_gradient_over_acceptance():
    logits = torch.tensor([[0.3, -0.2, 0.1]], requires_grad=True)
    tv = TotalVariation()(logits.log_softmax(-1), P.log(), LABELS).sum()
    (tv_grad,) = torch.autograd.grad(tv, logits)
    lk = LogAcceptance()(logits.log_softmax(-1), P.log(), LABELS).sum()
    (lk_grad,) = torch.autograd.grad(lk, logits)
    accepted = float(acceptance(logits.log_softmax(-1), P.log()))
    assert torch.allclose(lk_grad, tv_grad / accepted, atol=1e-6)


def test_hybrid_mixes_and_refuses_a_weight_outside_zero_one():
    got = float(Hybrid(0.25)(Q.log(), P.log(), LABELS))
    assert got == pytest.approx(0.25 * losses_of(P, Q)["kl"] + 0.75 * losses_of(P, Q)["lk"])
    with pytest.raises(ValueError, match="kl_weight"):
        Hybrid(1.5)
