"""Multi-draft verification: SpecTr's k-sequential selection (Sun et al., NeurIPS 2023) at every node
whose k children were drawn i.i.d. from q; the token rule for point and wor children.

The k drafts are tried in order, each accepted with probability min(1, p(x) / (rho q(x))), with p and
q left as they are between siblings (the token rule subtracts q after each rejection instead). With
beta = sum_x min(q(x), p(x) / rho), draft i is accepted with probability (1 - beta)^(i-1) min(q, p/rho),
so the emitted law is p exactly when the token after k rejections is drawn from
    p_res(x) = [p(x) - min(q(x), p(x) / rho) (1 - (1 - beta)^k) / beta] / (1 - beta)^k,
which is a law iff rho >= c(rho) = (1 - (1 - beta)^k) / beta. rho = k always is; the smallest feasible
rho accepts most, searched on a grid over [1, k] (each round keeps a feasible point, so the rule is
exact whatever the search's precision). k = 1 is the token rule. Why this one: of the optimal-transport
rules, it is the one with an exact closed form at any vocabulary size (SpecTr's optimal coupling, and
the LP-based rules of SpecHub and Hu et al., solve a program per node); the oracle
(experiments.oracle) measures how far it stays from the best.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from verifiers.rules import LOSSLESS_RULES, NodeLaw, at, normalize_or_keep
from verifiers.tree_verifier import TreeVerifier

# candidate rho per round, GRID_ROUNDS rounds: rho to within (k - 1) / 16^3 above the smallest feasible grid point
GRID = 17
GRID_ROUNDS = 3
CHUNK_ELEMENTS = 1 << 22  # [rows, GRID, V] elements per chunk of rows


def _accepted_mass(p, q, rho):
    """beta [A] = sum_x min(q(x), p(x) / rho) for p, q [A, V], rho [A]."""
    return torch.minimum(q, p / rho[:, None]).sum(-1)


def _needed(beta, k):
    """c [A] = (1 - (1 - beta)^k) / beta (its limit k where beta = 0)."""
    return torch.where(beta > 0, (1 - (1 - beta) ** k) / torch.where(beta > 0, beta, 1), k)


def sequential_scale(p: torch.Tensor, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """A feasible rho [A] for k [A] drafts, near the smallest: rounds of a grid search on [1, k], each keeping
    the first feasible point (feasible whatever the precision, so the rule stays exact)."""
    k = k.to(p.dtype)
    rows = max(1, CHUNK_ELEMENTS // (GRID * p.shape[-1]))
    return torch.cat([_scale_rows(p[i : i + rows], q[i : i + rows], k[i : i + rows])
                      for i in range(0, p.shape[0], rows)]) \
        if p.shape[0] else k.clone()


def _scale_rows(p, q, k):
    lo, hi = torch.ones_like(k), k.clone()  # rho = k is feasible: c <= k
    steps = torch.linspace(0, 1, GRID, dtype=p.dtype, device=p.device)  # [G]
    for _ in range(GRID_ROUNDS):
        grid = lo[:, None] + (hi - lo)[:, None] * steps  # [A, G]; its last point is hi, feasible
        beta = torch.minimum(q[:, None, :], p[:, None, :] / grid[..., None]).sum(-1)  # [A, G]
        first = (grid >= _needed(beta, k[:, None])).to(torch.int8).argmax(1)  # [A] the first feasible point
        hi = grid.gather(1, first[:, None])[:, 0]
        lo = grid.gather(1, (first - 1).clamp_min(0)[:, None])[:, 0]
    return hi


class SequentialRule:
    """k-sequential selection among a node's k i.i.d. children."""

    lossless = True

    def accept_probability(self, law: NodeLaw, token: torch.Tensor) -> torch.Tensor:
        rho = sequential_scale(law.p, law.q, law.siblings)
        q_c = at(law.q, token)
        return torch.clamp(at(law.p, token) / (rho * q_c).clamp_min(torch.finfo(q_c.dtype).tiny), max=1.0)

    def after_reject(self, law: NodeLaw, token: torch.Tensor) -> NodeLaw:
        """r := p_res, the law after all k are rejected (read only once the last one is; p and q stay)."""
        k = law.siblings.to(law.p.dtype)
        rho = sequential_scale(law.p, law.q, law.siblings)
        beta = _accepted_mass(law.p, law.q, rho)
        taken = torch.minimum(law.q, law.p / rho[:, None]) * _needed(beta, k)[:, None]  # [A, V]
        return replace(law, r=normalize_or_keep((law.p - taken).clamp_min_(0), law.p, in_place=True))


def multidraft_verifier() -> TreeVerifier:
    """k-sequential selection at i.i.d. nodes; the token rule for point and wor children."""
    return TreeVerifier({**LOSSLESS_RULES, "iid": SequentialRule()})
