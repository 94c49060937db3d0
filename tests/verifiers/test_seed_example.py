"""The seed example of docs/design.md section 4 through the real verifier, under the enumerating source."""

import math

import torch

from framework.core.tree import CandidateTree
from harness.enumerate import enumerate_law
from verifiers import LOSSLESS, typical_verifier, verify

P = torch.tensor([0.5, 0.3, 0.2], dtype=torch.float64)
Q = torch.tensor([0.2, 0.5, 0.3], dtype=torch.float64)


def one_token_law(p, q, verifier=LOSSLESS):
    """Exact law of (first emitted token, accepted?) for one drafted token x ~ q."""

    def run(rng):
        B = rng.batch_size
        draft = rng.categorical(q.expand(B, 3))[:, None]  # [B, 1]
        tree = CandidateTree.chain(draft, q.expand(B, 2, 3), kind="iid")
        res = verify(tree, p.expand(B, 2, 3), rng=rng, verifier=verifier)
        assert not torch.isnan(res.tokens.float()).any()
        return [(int(t), bool(a)) for t, a in zip(res.tokens[:, 0], res.num_accepted)]

    return enumerate_law(run)


def test_seed_example_masses():
    law = one_token_law(P, Q)
    accepted = [law.get((c, True), 0.0) for c in range(3)]
    rejected = [law.get((c, False), 0.0) for c in range(3)]
    assert all(math.isclose(a, e, abs_tol=1e-12) for a, e in zip(accepted, [0.2, 0.3, 0.2]))
    assert math.isclose(sum(rejected), 0.3, abs_tol=1e-12)
    residual = [r / sum(rejected) for r in rejected]
    assert all(math.isclose(a, e, abs_tol=1e-12) for a, e in zip(residual, [1.0, 0.0, 0.0]))
    output = [accepted[c] + rejected[c] for c in range(3)]
    assert all(math.isclose(a, e, abs_tol=1e-12) for a, e in zip(output, P.tolist()))


def test_p_equals_q_never_rejects_and_never_nans():
    law = one_token_law(P, P)
    assert sum(w for (_, acc), w in law.items() if not acc) == 0.0
    assert all(math.isclose(law[(c, True)], P[c].item(), abs_tol=1e-12) for c in range(3))


def test_unreachable_residual_is_guarded_when_forced():
    # With p == q no coin can reject, so drive the rule's reject branch directly.
    from verifiers.rules import IidRule, NodeLaw

    law = NodeLaw(P[None], P[None], P[None])
    after = IidRule().after_reject(law, torch.tensor([0]))
    assert torch.isfinite(after.r).all() and torch.allclose(after.r.sum(-1), torch.ones(1, dtype=torch.float64))


def test_typical_acceptance_is_not_the_target_law():
    law = one_token_law(P, Q, typical_verifier())
    output = [sum(w for (c, _), w in law.items() if c == tok) for tok in range(3)]
    assert 0.5 * sum(abs(o - p) for o, p in zip(output, P.tolist())) > 1e-3
