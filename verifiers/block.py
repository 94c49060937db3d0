"""Block verification (Sun et al., ICLR 2025): a chain judged jointly, optimal among chain verifiers.

For a chain X_1..X_K drawn from q (q_i = the law X_i was drawn from, p_i the target's law there;
a point chain is drawn from point masses), with weights w_0 = 1, w_i = min(1, w_{i-1} p_i(X_i) / q_i(X_i)):
  residual at i (0 <= i < K):   res_i(x) = max(w_i p_{i+1}(x) - q_{i+1}(x), 0), of mass m_i
  keep-probability:             h_K = w_K,  h_i = m_i / (m_i + 1 - w_i) for 1 <= i < K
From i = K down to 1, the first i whose coin falls under h_i is the accepted length tau (none:
tau = 0). Then X_1..X_tau and one more token: the bonus from p_{K+1} when tau = K, else a draw from
res_tau normalised. The token rule stops at the first rejection; here a rejection at i can still
be followed by acceptance of the whole block, which is why it accepts more (never less).

Ragged batches of chains (vLLM's, lengths differing) are verified one length at a time (verifiers/by_shape.py).
Trees go to the token rule (said once). EOS: tokens after an
accepted EOS are dropped (a function of an exactly distributed sequence is exact).
"""

from __future__ import annotations

import warnings

import torch

from framework.core.ragged_tree import RaggedTrees
from framework.core.randomness import RandomSource
from framework.core.tree import CandidateTree
from framework.core.verification import Verification
from verifiers.by_shape import verify_by_shape
from verifiers.emit import NodePicker
from verifiers.rules import normalize_or_keep, widened
from verifiers.tree_verifier import TreeVerifier


class BlockVerifier(NodePicker):
    """Block verification on chains (point, iid; a wor chain is an iid one), the token rule elsewhere."""

    def __init__(self, fallback: TreeVerifier | None = None):
        self.fallback = fallback or TreeVerifier()
        self._warned = False

    # Hooks, one formula each, so that the harness can plant bugs in exactly one place.
    def drawn_from(self, tree: CandidateTree, tokens: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
        """q [B, K+1, V]: the laws the chain's tokens were drawn from; a point chain's are point masses
        (its rule is blind to the coins), whatever q it carries."""
        if tree.kind == "point":
            return torch.nn.functional.pad(torch.nn.functional.one_hot(tokens, p.shape[-1]).to(p.dtype), (0, 0, 0, 1))
        return tree.draft_probs

    def weights(self, p_drafted: torch.Tensor, q_drafted: torch.Tensor) -> torch.Tensor:
        """p_drafted, q_drafted [B, K] -> w [B, K+1]: w_0 = 1, w_i = min(1, w_{i-1} p_i(X_i) / q_i(X_i))."""
        ratio = p_drafted / q_drafted.clamp_min(torch.finfo(q_drafted.dtype).tiny)  # q(X_i) > 0 for a drawn token
        w = [torch.ones_like(ratio[:, 0])]
        for i in range(ratio.shape[1]):
            w.append(torch.clamp(w[-1] * ratio[:, i], max=1.0))
        return torch.stack(w, 1)

    def residuals(self, w: torch.Tensor, p: torch.Tensor, q: torch.Tensor) -> torch.Tensor:
        """w [B, K+1], p and q [B, K+1, V] -> res [B, K, V]: max(w_i p_{i+1} - q_{i+1}, 0), i = 0..K-1."""
        K = p.shape[1] - 1
        return (w[:, :K, None] * p[:, :K] - q[:, :K]).clamp_min_(0)

    def keep_probabilities(self, w: torch.Tensor, mass: torch.Tensor) -> torch.Tensor:
        """h [B, K]: column i-1 is h_i; h_i = m_i / (m_i + 1 - w_i) (0 where both vanish), h_K = w_K."""
        K = mass.shape[1]
        m, rest = mass[:, 1:], 1 - w[:, 1:K]  # i = 1..K-1
        denominator = m + rest
        h = torch.where(denominator > 0, m / torch.where(denominator > 0, denominator, 1), 0)
        return torch.cat([h, w[:, K:]], 1)

    def __call__(self, tree, target_probs: torch.Tensor, rng: RandomSource,
                 eos_token_id: int | None = None) -> Verification:
        if isinstance(tree, RaggedTrees) and tree.is_chains:
            return verify_by_shape(self, tree, target_probs, rng, eos_token_id)  # ragged chains: one group per length
        if not (isinstance(tree, CandidateTree) and tree.is_chain):
            if not self._warned:
                warnings.warn("block verification judges chains: this tree goes to the token rule", stacklevel=2)
                self._warned = True
            return self.fallback(tree, target_probs, rng, eos_token_id)
        if tree.tokens.shape[1] == 0:  # plain decoding
            return self.fallback(tree, target_probs, rng, eos_token_id)
        tree, p = widened(tree, target_probs)  # p [B, K+1, V]
        B, K = tree.tokens.shape
        V, device = p.shape[-1], p.device
        tokens = tree.tokens.to(device)
        q = self.drawn_from(tree, tokens, p)  # [B, K+1, V]
        w = self.weights(p[:, :K].gather(-1, tokens[..., None])[..., 0], q[:, :K].gather(-1, tokens[..., None])[..., 0])
        residual = self.residuals(w, p, q)  # [B, K, V]
        h = self.keep_probabilities(w, residual.sum(-1))  # [B, K]

        uniforms = rng.uniform((B, K + 1, 1), device)  # the token rule's shape: column i-1 for h_i
        accepted = self.select(uniforms, h)  # [B] tau

        final = torch.empty(B, V, dtype=p.dtype, device=device)
        full = accepted == K
        final[full] = p[full, K]
        short = (~full).nonzero().squeeze(1)
        if short.numel():
            final[short] = normalize_or_keep(residual[short, accepted[short]], p[short, accepted[short]])
        return self.emit(tree, accepted, final, rng, eos_token_id)  # a chain: node tau - 1 is row tau

    def select(self, uniforms, h: torch.Tensor) -> torch.Tensor:
        """tau [B]: the largest i whose coin falls under h_i (0 if none), trying i = K down to 1."""
        B, K = h.shape
        accepted = torch.zeros(B, dtype=torch.long, device=h.device)
        open_rows = torch.ones(B, dtype=torch.bool, device=h.device)
        for i in range(K, 0, -1):
            if not bool(open_rows.any()):
                break
            # the whole column (the harness's lazy coins), closed rows against 0: never taken, no branch
            hit = self.accepts(uniforms[:, i - 1, 0], torch.where(open_rows, h[:, i - 1], 0)) & open_rows
            accepted[hit] = i
            open_rows &= ~hit
        return accepted

    def accepts(self, u, h: torch.Tensor) -> torch.Tensor:
        return u < h  # strict, as the token rule's: an h of 0 is never taken
