"""Bugs planted in the verification rules beyond the token rule (block, traversal, multidraft): each must be
caught by the exact harness, as the token rule's are (harness/mutants.py lists them)."""

from __future__ import annotations

from dataclasses import replace

import torch

from verifiers.block import BlockVerifier
from verifiers.multidraft import SequentialRule, sequential_scale
from verifiers.rules import normalize_or_keep
from verifiers.traversal import TraversalVerifier


class BlockUnweightedResidual(BlockVerifier):
    """The residual at i without the weight: max(p_{i+1} - q_{i+1}, 0), the token rule's."""

    def residuals(self, w, p, q):
        return super().residuals(torch.ones_like(w), p, q)


class BlockKeepWithoutRest(BlockVerifier):
    """h_i = m_i: the 1 - w_i term of the keep-probability's denominator dropped."""

    def keep_probabilities(self, w, mass):
        K = mass.shape[1]
        return torch.cat([mass[:, 1:], w[:, K:]], 1)


class BlockShortestFirst(BlockVerifier):
    """tau = the smallest i whose coin falls under h_i, trying i = 1 up (the paper reads from K down)."""

    def select(self, uniforms, h):
        B, K = h.shape
        accepted = torch.zeros(B, dtype=torch.long, device=h.device)
        open_rows = torch.ones(B, dtype=torch.bool, device=h.device)
        for i in range(1, K + 1):
            hit = self.accepts(uniforms[:, i - 1, 0], torch.where(open_rows, h[:, i - 1], 0)) & open_rows
            accepted[hit] = i
            open_rows &= ~hit
        return accepted


class BlockReadsQOnPointChains(BlockVerifier):
    """A point chain that carries the draft's q judged as if drawn from it (the bug block had until this
    mutant's fix: its test for point chains was `q is None`)."""

    def drawn_from(self, tree, tokens, p):
        return super().drawn_from(tree, tokens, p) if tree.draft_probs is None else tree.draft_probs


class TraversalKeepsRejectedSubtree(TraversalVerifier):
    """A deleted child leaves its parent's state as it was: the rejected subtree's mass stays in P_u."""

    def deleted(self, w, P, Q, token, kind):
        return w, P, Q


class TraversalUnweightedChildren(TraversalVerifier):
    """A deleted child's residual taken without the parent's weight: max(P_u - Q_u, 0), the token rule's."""

    def deleted(self, w, P, Q, token, kind):
        new_w, new_P, new_Q = super().deleted(torch.ones_like(w), P, Q, token, kind)
        return torch.where(w < 1, w * new_w, new_w), new_P, new_Q


class TraversalWorWithoutQUpdate(TraversalVerifier):
    """wor siblings judged against the q the first was drawn from: the deleted ones never leave it."""

    def deleted(self, w, P, Q, token, kind):
        return super().deleted(w, P, Q, token, "iid" if kind == "wor" else kind)


class SequentialRhoOne(SequentialRule):
    """k-sequential selection with rho = 1 whatever k: its residual is no law (clamped at 0), the output too heavy."""

    def accept_probability(self, law, token):
        return super().accept_probability(replace(law, siblings=torch.ones_like(law.siblings)), token)

    def after_reject(self, law, token):
        return replace(super().after_reject(replace(law, siblings=torch.ones_like(law.siblings)), token),
                       siblings=law.siblings)


class SequentialResidualOfOneDraft(SequentialRule):
    """The residual after k rejections computed as if one draft had been tried (the c factor dropped)."""

    def after_reject(self, law, token):
        rho = sequential_scale(law.p, law.q, law.siblings)
        taken = torch.minimum(law.q, law.p / rho[:, None])
        return replace(law, r=normalize_or_keep((law.p - taken).clamp_min(0), law.p))
