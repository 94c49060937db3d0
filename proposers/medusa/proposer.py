"""Medusa: K heads on the target's last hidden state propose a static tree (docs/design.md section 8).

At a step, the heads read the target's hidden state at the last accepted position (the one whose
logits produced the root); head d's candidates fill depth d+1 of the tree. The tree is a list of
"choices" (rank paths), by default the one searched from the heads' measured accuracy
(proposers/search/tree_search.py) and saved beside the heads.

kind "point": node (r_1..r_d) takes head d's r_d-th most likely token (ranks by the heads' raw
logits: a choice by value, verified with the point rule). kind "iid" / "wor": each node's
children are drawn from head (its depth)'s processed law q, which the verifier receives; the
heads' law uses the target's temperature, top-k, top-p and min-p (no repetition penalty: q
only has to be the law the children were drawn from, and it is). The proposer keeps no state:
the hidden state arrives with each DecodeState.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path
from typing import Sequence

import torch

from framework.core.drafting import draw_children, top_tokens
from framework.core.proposer import DecodeState
from framework.core.sampling import SamplingConfig, process_logits
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape
from proposers.heads import load_head
from proposers.medusa.heads import MedusaHeads
from verifiers.tree_verifier import Verification


class MedusaProposer:
    hidden_layers = (-1,)  # what it reads from the target: the last (post-norm) hidden state
    couples_rows = False  # a static tree

    def __init__(
        self,
        heads: MedusaHeads | str | Path,
        choices: Sequence[Sequence[int]] | None = None,
        kind: str = "point",
        sampling: SamplingConfig | None = None,
    ):
        """choices: the tree as rank paths (default: a chain of one node per head).
        sampling: the law the heads draw from for iid/wor (default: the target's).
        heads: heads, or a folder in any layout proposers.load_head reads (ours, Medusa-1, version 2, Medusa-2)."""
        heads = load_head(heads) if isinstance(heads, (str, Path)) else heads
        if not isinstance(heads, MedusaHeads):
            raise ValueError(f"Medusa needs Medusa heads, got {type(heads).__name__} (an EAGLE folder?)")
        if kind not in ("point", "iid", "wor"):
            raise ValueError(f"kind must be point, iid or wor, got {kind!r}")
        choices = [tuple(c) for c in choices] if choices is not None else [(0,) * d for d in range(1, heads.config.num_heads + 1)]
        if not choices:
            raise ValueError("Medusa needs a tree of at least one node: choices is empty")
        self.shape = TreeShape.from_choices(choices)
        self.depth = self.shape.depth  # [N], 1-based
        if int(self.depth.max()) > heads.config.num_heads:
            raise ValueError(f"the tree is {int(self.depth.max())} deep but there are only {heads.config.num_heads} heads")
        self.heads, self.kind, self.sampling = heads.eval(), kind, sampling
        self.ranks = int(self.shape.ranks.max()) + 1

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        hidden_size = target.lm.model.config.hidden_size
        self.heads.check_target(hidden_size, target.vocab_size)
        if self.ranks > target.vocab_size:
            raise ValueError(f"the tree takes rank {self.ranks - 1} but the vocabulary has {target.vocab_size} tokens")
        self.heads.to(device=target.device, dtype=target.dtype)
        self.lm_head = target.lm.model.get_output_embeddings()  # "version 2" heads read through it

    @torch.no_grad()
    def propose(self, state: DecodeState) -> CandidateTree:
        if state.target_hidden is None:
            raise ValueError("Medusa needs the target's last hidden state: the target did not return it")
        shape = self.shape if state.plan.depth is None else self.shape.prefix(int((self.depth <= state.plan.depth).sum()))
        if shape.num_nodes == 0:  # a plain step: no head is read
            return CandidateTree.empty(state.root.shape[0], state.root.device)
        logits = self.heads(state.target_hidden[:, -1], self.lm_head)  # [B, K, V]
        if self.kind == "point":
            ranked = top_tokens(logits.flatten(0, 1), self.ranks).view(*logits.shape[:2], self.ranks)  # [B, K, R]
            tree = CandidateTree.by_rank(shape, ranked)
            probs = logits.float().softmax(-1).gather(2, ranked)  # [B, K, R]
            chosen = probs[:, shape.depth - 1, shape.ranks.to(probs.device)]  # [B, N] each node's own head probability
            return CandidateTree(tree.tokens, shape, None, "point", along_paths(chosen, shape))
        cfg = replace(self.sampling or state.sampling, repetition_penalty=1.0)
        laws = process_logits(logits, cfg)  # [B, K, V]: head d's law, for every node at depth d
        row_depth = torch.cat([torch.zeros(1, dtype=torch.long), self.depth[: shape.num_nodes]]).clamp_max(laws.shape[1] - 1)
        q = laws[:, row_depth]  # [B, N+1, V]: row i draws the children at depth(i) + 1
        tokens = torch.zeros(logits.shape[0], shape.num_nodes, dtype=torch.long, device=logits.device)
        for row, kids in enumerate(shape.child_lists):
            if kids:
                tokens[:, kids] = draw_children(q[:, row], len(kids), self.kind, state.rng)
        drawn = q[:, shape.parents + 1].gather(2, tokens[..., None]).squeeze(2).float()  # [B, N] each node's q
        return CandidateTree(tokens, shape, q, self.kind, along_paths(drawn, shape))

    def commit(self, result: Verification) -> None:
        pass  # stateless: the next hidden state comes from the target

    def select(self, rows: torch.Tensor) -> None:
        pass  # no state per row


def along_paths(node_probs: torch.Tensor, shape: TreeShape) -> torch.Tensor:
    """node_probs [B, N] -> [B, N]: the product of the probabilities along each node's path."""
    scores = node_probs.clone()
    for level in shape.levels[1:]:
        scores[:, level] *= scores[:, shape.parents[level]]
    return scores
