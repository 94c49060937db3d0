"""CandidateTree: what every proposer emits and the verifier consumes (docs/design.md section 3)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import torch

from framework.core.tree_shape import TreeShape

KINDS = ("point", "iid", "wor")


def integers(name: str, values, device=None) -> torch.Tensor:
    """values (a tensor or a list) as a long tensor (on `device`, if given); floats and booleans are
    refused, never truncated."""
    if not isinstance(values, torch.Tensor):
        values = torch.as_tensor(values, device=device)
        if values.numel() == 0:
            values = values.long()
    if values.dtype.is_floating_point or values.dtype.is_complex or values.dtype == torch.bool:
        raise ValueError(f"{name} must hold integers, got {values.dtype}")
    return values.to(device=values.device if device is None else device, dtype=torch.long)


@dataclass
class CandidateTree:
    """Candidates for one verify step, batched; the root is the last emitted token.

    tokens:      [B, N] candidate token per node (shape shared by the batch).
    parents:     [N] parent node index, -1 = child of the root; topologically ordered. May be given
                 as a TreeShape: the tree then shares its views (depths, mask, children, paths),
                 computed once for a shape a proposer drafts every step.
    draft_probs: [B, N+1, V] or None. Row 0 is the law the root's children were drawn from,
                 row i+1 the law node i's children were drawn from. Required for iid/wor.
    kind:        how children were chosen: "point" (by a rule blind to the verifier's coins),
                 "iid" (independent draws from q, duplicates kept, in draw order) or
                 "wor" (draws without replacement from q, in draw order).
    scores:      [B, N] or None: the proposer's own estimate that each node is accepted (its draft
                 probability along the path, a match count's share). The speculation policy reads it
                 to size the step (framework/core/policy.py); the verifier never does.
    origin:      [N] or None: each node's index in the tree its proposer drafted, kept through every cut
                 (`keep_nodes`), so a verified path maps back to the proposer's nodes in one step (`drafted`);
                 None: this is the drafted tree.
    """

    tokens: torch.Tensor
    parents: torch.Tensor
    draft_probs: torch.Tensor | None = None
    kind: str = "point"
    scores: torch.Tensor | None = None
    origin: torch.Tensor | None = field(default=None, compare=False)
    shape: TreeShape = field(init=False, repr=False)  # the topology and its views

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        if self.tokens.dim() != 2:
            raise ValueError(f"tokens must be [B, N], got shape {tuple(self.tokens.shape)}")
        if self.tokens.dtype not in (torch.int64, torch.int32):
            raise ValueError(f"tokens must be integer ids, got {self.tokens.dtype}")
        given = self.parents
        self.shape = given if isinstance(given, TreeShape) else TreeShape(integers("parents", given).cpu())
        self.parents = self.shape.parents
        if self.parents.numel() != self.tokens.shape[1]:
            raise ValueError(
                f"tokens have {self.tokens.shape[1]} nodes but parents has {self.parents.numel()}"
            )
        if self.kind != "point" and self.draft_probs is None:
            raise ValueError(f"kind {self.kind!r} needs draft_probs (the law children were drawn from)")
        if self.draft_probs is not None:
            b, n = self.tokens.shape
            if self.draft_probs.dim() != 3 or self.draft_probs.shape[:2] != (b, n + 1):
                raise ValueError(
                    f"draft_probs must be [B, N+1, V] = [{b}, {n + 1}, V], "
                    f"got {tuple(self.draft_probs.shape)}"
                )
        if self.scores is not None and tuple(self.scores.shape) != tuple(self.tokens.shape):
            raise ValueError(f"scores must be [B, N] = {list(self.tokens.shape)}, got {list(self.scores.shape)}")

    # ---- builders -------------------------------------------------------------------------

    @staticmethod
    def chain(
        tokens: torch.Tensor, draft_probs: torch.Tensor | None = None, kind: str = "point"
    ) -> CandidateTree:
        """A chain of K tokens: tokens [B, K], draft_probs [B, K+1, V]."""
        parents = torch.arange(-1, tokens.shape[-1] - 1)
        return CandidateTree(tokens, parents, draft_probs, kind)

    @staticmethod
    def empty(batch_size: int, device=None) -> CandidateTree:
        """No candidates: a plain step (one token from the root's law per row)."""
        return CandidateTree(torch.zeros(batch_size, 0, dtype=torch.long, device=device),
                             torch.zeros(0, dtype=torch.long))

    @staticmethod
    def from_parents(
        tokens: torch.Tensor,
        parents: torch.Tensor | Sequence[int],
        draft_probs: torch.Tensor | None = None,
        kind: str = "point",
    ) -> CandidateTree:
        return CandidateTree(tokens, parents, draft_probs, kind)

    @staticmethod
    def from_paths(
        choices: Sequence[Sequence[int]], topk_tokens: torch.Tensor, draft_probs: torch.Tensor | None = None
    ) -> CandidateTree:
        """Medusa-style: node with path (r_1..r_d) takes topk_tokens[:, d-1, r_d].

        topk_tokens [B, D, K]: the top-K candidates for each depth (for Medusa, head d-1's).
        Children are chosen by rank, so the kind is "point".
        """
        return CandidateTree.by_rank(TreeShape.from_choices(choices), topk_tokens, draft_probs)

    @staticmethod
    def by_rank(shape: TreeShape, topk_tokens: torch.Tensor, draft_probs: torch.Tensor | None = None) -> CandidateTree:
        """Node i at depth d with rank r takes topk_tokens[:, d - 1, r]: a static shape filled by rank."""
        depth = shape.depth - 1  # [N]
        if int(depth.max()) >= topk_tokens.shape[1] or int(shape.ranks.max()) >= topk_tokens.shape[2]:
            raise ValueError(
                f"the shape needs depth {int(depth.max()) + 1} and rank {int(shape.ranks.max())}, "
                f"but topk_tokens is {tuple(topk_tokens.shape)}"
            )
        tokens = topk_tokens[:, depth, shape.ranks.to(topk_tokens.device)]  # [B, N]
        return CandidateTree(tokens, shape, draft_probs, "point")

    # ---- derived views --------------------------------------------------------------------

    @property
    def batch_size(self) -> int:
        return self.tokens.shape[0]

    @property
    def num_nodes(self) -> int:
        return self.tokens.shape[1]

    @property
    def is_chain(self) -> bool:
        """Each node the only child of the one before it (the root's first): what CandidateTree.chain builds."""
        return self.shape.is_chain

    def within_depth(self, max_depth: int) -> "CandidateTree":
        """The tree without its nodes deeper than max_depth (self when no node is deeper). Whole levels go: a
        shape fixed before any coin, so the tree that remains is verified exactly (the room left in the context,
        or in the token budget)."""
        if max_depth >= self.num_nodes or self.shape.max_depth <= max_depth:  # no node is that deep
            return self
        return self.keep_nodes((self.depth() <= max_depth).nonzero().flatten())  # a prefix of every path

    def drafted(self, path: torch.Tensor) -> torch.Tensor:
        """path [B, D] node indices here (-1 padded) -> the same nodes' indices in the drafted tree."""
        if self.origin is None:
            return path
        return torch.where(path >= 0, self.origin.to(path.device)[path.clamp_min(0)], -1)

    def keep_nodes(self, kept: torch.Tensor) -> "CandidateTree":
        """The tree of the nodes kept [N'] (ascending indices, closed under ancestors), renumbered in order; each
        remembers its index in the drafted tree (`origin`)."""
        new_index = torch.full((self.num_nodes,), -1, dtype=torch.long)
        new_index[kept] = torch.arange(kept.numel())
        parents = self.parents[kept]
        if bool((new_index[parents.clamp_min(0)][parents >= 0] < 0).any()):
            raise ValueError("kept nodes must include every kept node's parent")
        parents = torch.where(parents >= 0, new_index[parents.clamp_min(0)], -1)
        device = self.tokens.device
        q = None if self.draft_probs is None else self.draft_probs[
            :, torch.cat([torch.zeros(1, dtype=torch.long), kept + 1]).to(self.draft_probs.device)]
        scores = None if self.scores is None else self.scores[:, kept.to(self.scores.device)]
        origin = kept if self.origin is None else self.origin[kept]
        return CandidateTree(self.tokens[:, kept.to(device)], parents, q, self.kind, scores, origin)

    def depth(self) -> torch.Tensor:
        """[N] depth of each node (root's children: 1). Shared: do not write into it."""
        return self.shape.depth

    def ancestor_mask(self) -> torch.Tensor:
        """[N+1, N+1] bool, row 0 = root: who each row may attend to inside the tree. Shared."""
        return self.shape.ancestors

    def paths(self) -> list[list[int]]:
        """Root-to-leaf node index lists."""
        return self.shape.paths
