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

import warnings
from typing import Sequence

import torch

from framework.core.proposer import DecodeState
from framework.core.sampling import SamplingConfig
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape
from framework.core.verification import Verification
from framework.lm.sharding import ReturnsTo
from proposers.common.loaded import refuse_path
from proposers.common.position_tree import position_law_tree
from proposers.medusa.defaults import SOURCE, published_choices
from proposers.medusa.heads import MedusaHeads


class MedusaProposer:
    hidden_layers = (-1,)  # what it reads from the target: the last (post-norm) hidden state
    couples_rows = False  # a static tree

    def __init__(
        self,
        heads: MedusaHeads,
        choices: Sequence[Sequence[int]] | str | None = None,
        kind: str = "point",
        sampling: SamplingConfig | None = None,
    ):
        """choices: the tree as rank paths (default: a chain of one node per head); "auto": the tree measured for these
        heads (medusa_tree.json beside them), else Medusa's published default tree, with a warning that says so.
        sampling: the law the heads draw from for iid/wor (default: the target's).
        heads: loaded heads (proposers.load_head reads ours, Medusa-1, version 2 and Medusa-2 folders; a config
        builds them: models.medusa.heads.path=<folder>)."""
        refuse_path(heads, "MedusaProposer", "heads", "models.medusa.heads.path")
        if not isinstance(heads, MedusaHeads):
            raise ValueError(f"Medusa needs Medusa heads, got {type(heads).__name__} (an EAGLE folder?)")
        if kind not in ("point", "iid", "wor"):
            raise ValueError(f"kind must be point, iid or wor, got {kind!r}")
        self.published = choices == "auto" and "choices" not in heads.searched  # nothing measured for these heads
        if self.published:
            warnings.warn(f"no tree measured for these Medusa heads (no medusa_tree.json beside them): {SOURCE}. "
                          "A tree measured for them on this target decodes faster: "
                          "python -m experiments.search_tree target.path=T head=H writes one beside them; "
                          "proposer.choices overrides", stacklevel=2)
            choices = published_choices(heads.config.num_heads)
        elif choices == "auto":
            choices = heads.searched["choices"]
        choices = ([tuple(c) for c in choices] if choices is not None
                   else [(0,) * d for d in range(1, heads.config.num_heads + 1)])
        if not choices:
            raise ValueError("Medusa needs a tree of at least one node: choices is empty")
        self.shape = TreeShape.from_choices(choices)
        self.depth = self.shape.depth  # [N], 1-based
        if int(self.depth.max()) > heads.config.num_heads:
            raise ValueError(f"the tree is {int(self.depth.max())} deep "
                             f"but there are only {heads.config.num_heads} heads")
        self.heads, self.kind, self.sampling = heads.eval(), kind, sampling
        self.ranks = int(self.shape.ranks.max()) + 1

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        hidden_size = target.model.config.hidden_size
        self.heads.check_target(hidden_size, target.vocab_size)
        if self.ranks > target.vocab_size:
            raise ValueError(f"the tree takes rank {self.ranks - 1} but the vocabulary has {target.vocab_size} tokens")
        self.heads.to(device=target.device, dtype=target.dtype)
        # "version 2" heads read through it
        self.lm_head = ReturnsTo(target.model.get_output_embeddings(), target.device)

    @torch.no_grad()
    def propose(self, state: DecodeState) -> CandidateTree:
        if state.target_hidden is None:
            raise ValueError("Medusa needs the target's last hidden state: the target did not return it")
        shape = (self.shape if state.plan.depth is None
                 else self.shape.prefix(int((self.depth <= state.plan.depth).sum())))
        if shape.num_nodes == 0:  # a plain step: no head is read
            return CandidateTree.empty(state.root.shape[0], state.root.device)
        logits = self.heads(state.target_hidden[:, -1], self.lm_head)  # [B, K, V]
        return position_law_tree(logits, shape, self.kind, self.sampling or state.sampling, state.rng, state.constraint)

    def commit(self, result: Verification) -> None:
        pass  # stateless: the next hidden state comes from the target

    def select(self, rows: torch.Tensor) -> None:
        pass  # no state per row

    def join(self, other) -> None:
        pass

