"""P-EAGLE: every depth of an EAGLE-3 head's draft from one head call (vLLM's parallel drafting).

The head call that catches up on the positions the target committed (proposers/eagle/proposer.py)
also reads K - 1 mask positions after the root's: each reads the `pard_token` embedding and the
learned feature fc(mask_hidden), and attends to the committed positions and the masks before it.
The root's output gives the law of depth 1, mask j's that of depth j + 1, none conditioned on the
tokens drafted before it. The tree comes from those laws (proposers/common/position_tree.py): a
static tree of top-ranked tokens per depth (point, the default) or a chain drawn from each depth's
law with that law as the verifier's q (iid). One head call per step, where EAGLE pays one per depth.
"""

from __future__ import annotations

from typing import Sequence

import torch

from framework.core.proposer import DecodeState
from framework.core.sampling import SamplingConfig
from framework.core.tree import CandidateTree
from proposers.common.committed import left_aligned, ragged_then_block
from proposers.common.position_tree import position_law_tree, shape_of, within
from proposers.eagle.head import EagleHead
from proposers.eagle.proposer import EagleProposer


class ParallelEagleProposer(EagleProposer):
    couples_rows = False  # a static shape

    def __init__(self, head: EagleHead, choices: Sequence[Sequence[int]] | None = None, depth: int = 4,
                 kind: str = "point", sampling: SamplingConfig | None = None, backend: str = "auto"):
        """depth: positions drafted per call (the root's and depth - 1 masks'); choices: the tree as rank
        paths (None: a chain of `depth`); kind: point (top-ranked), iid or wor (drawn from each depth's law)."""
        super().__init__(head, backend=backend)
        if self.head.config.pard_token is None:
            raise ValueError("P-EAGLE needs a head trained with mask positions (its config names a pard_token): "
                             "train one with `python -m experiments.train training=zoo_peagle`")
        if kind not in ("point", "iid", "wor"):
            raise ValueError(f"kind must be point, iid or wor, got {kind!r}")
        if depth < 1:
            raise ValueError(f"depth must be >= 1, got {depth}")
        self.couples_rows = False
        self.parallel_shape, self.kind, self.sampling = shape_of(choices, depth), kind, sampling
        self.forwards = 0

    @torch.no_grad()
    def propose(self, state: DecodeState) -> CandidateTree:
        if state.committed_hidden is None:
            raise ValueError("P-EAGLE needs the target's hidden states of the committed positions: "
                             "the target did not return them")
        shape = within(self.parallel_shape, state.plan.depth)
        if shape.num_nodes == 0:
            self.backlog.append(self.committed(state))
            return CandidateTree.empty(state.root.shape[0], state.root.device)
        logits = self.parallel_logits(state, shape.max_depth)
        return position_law_tree(logits, shape, self.kind, self.sampling or state.sampling, state.rng, state.constraint)

    def parallel_logits(self, state: DecodeState, depth: int) -> torch.Tensor:
        """One head call: the committed positions (kept) and depth - 1 masks after the root's
        -> logits [B, depth, V]."""
        hidden, tokens, count = left_aligned(self.backlog + [self.committed(state)])
        self.backlog = []
        B, A = tokens.shape
        device = self.cache.length.device
        head, extra = self.head, depth - 1
        pard = torch.full((B, extra), head.config.pard_token, dtype=torch.long, device=tokens.device)
        embedded = self.embed(torch.cat([tokens, pard], dim=1))  # [B, A + extra, H]
        features = head.fused(hidden.to(self.lm_head.weight.dtype))  # [B, A, H]
        features = torch.cat([features, head.mask_feature().to(features.dtype).expand(B, extra, -1)], dim=1)
        slots, block = torch.arange(A, device=device), torch.arange(1, depth, device=device)
        positions = torch.cat([self.cache.positions(slots), (self.cache.length + count - 1)[:, None] + block], dim=1)
        M = A + extra
        sees = ragged_then_block(count.to(device), A, extra)  # [B, M, M]
        mask = torch.cat([self.cache.valid[:, None, :].expand(B, M, -1), sees], dim=2)[:, None]  # [B, 1, M, S]
        out = head(embedded, features, positions, self.cache.cache, attention_mask=mask)
        self.cache.keep(slots.expand(B, A), count)  # the committed positions stay; the masks are dropped
        self.forwards += 1
        root_out = out[torch.arange(B, device=out.device), count - 1]  # [B, H]
        return head.logits(torch.cat([root_out[:, None], out[:, A:]], dim=1), self.lm_head)  # [B, depth, V]
