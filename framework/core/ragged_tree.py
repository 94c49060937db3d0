"""RaggedTrees: one verify step's candidates when requests differ in draft count and tree shape.

The flat layout engines hold: every request's nodes one after the other, with offsets. The
verifier walks it as a WalkLayout of global nodes; a CandidateTree, whose shape the batch shares,
is the special case (WalkLayout.of_candidate, its laws read where they lie).

Nodes are numbered globally for the walk: request b's root is node starts[b] + b and its node i
is starts[b] + b + 1 + i, so the laws of a batch lie in one table [T + B, V] (per request its
root's row, then its nodes'), or anywhere an engine keeps them, through `law_rows`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from framework.core.tree import KINDS, CandidateTree, integers


def _requests_and_positions(counts: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For flat nodes grouped by counts [B]: each node's request [T] and its index within it [T]."""
    starts = counts.cumsum(0) - counts
    request = torch.repeat_interleave(torch.arange(counts.numel(), device=counts.device), counts)
    return request, torch.arange(request.numel(), device=counts.device) - starts[request]


def depth_caps(max_depth, batch_size: int, device) -> torch.Tensor:
    """max_depth (an int, or one per request) -> [B] the deepest node each request may keep."""
    cap = torch.as_tensor(max_depth, device=device).reshape(-1)
    if cap.dtype.is_floating_point or cap.dtype == torch.bool or cap.numel() not in (1, batch_size) \
            or bool((cap < 0).any()):
        raise ValueError(f"max_depth must be an integer >= 0, or one per request ({batch_size}), got {max_depth}")
    return cap.long().expand(batch_size)


def check_counts(counts: torch.Tensor, total: int) -> None:
    """The offsets must add up: without it no field can be split into requests."""
    if counts.dim() != 1:
        raise ValueError(f"num_draft_tokens must be 1-D [B], got shape {tuple(counts.shape)}")
    if (counts < 0).any():
        raise ValueError(f"num_draft_tokens: request {int((counts < 0).nonzero()[0])} has a negative count")
    if int(counts.sum()) != total:
        raise ValueError(f"num_draft_tokens sums to {int(counts.sum())} but draft_token_ids holds {total} tokens")


@dataclass
class WalkLayout:
    """The verifier's view of a batch: global nodes, their children, their laws' rows."""

    tokens: torch.Tensor  # [G] each node's token (roots: 0, never read)
    children: torch.Tensor  # [G, C+1] global index of each node's k-th child, -1 padded (last column all -1)
    roots: torch.Tensor  # [B] each request's root
    law_rows: torch.Tensor | None  # [G] row of the law tables for each node; None = the node's own index
    bonus: torch.Tensor | None  # [B] token emitted at a leaf instead of a draw from its law
    max_depth: int  # deepest node's depth (root's children at 1); 0 when no request has nodes
    width: int  # most nodes in a request, + 1: the output's columns

    @staticmethod
    def of_candidate(tree: CandidateTree) -> "WalkLayout":
        """A shared-shape tree [B, N]: request b's nodes are rows b*(N+1) + 0..N of its laws [B, N+1, V],
        so the laws are the table as they lie; the shape's table is built once for every row."""
        B, N = tree.tokens.shape
        device = tree.tokens.device
        local = tree.shape.children.to(device)  # [N+1, C] node index of each row's children
        offsets = torch.arange(B, device=device)[:, None, None] * (N + 1)  # [B, 1, 1]
        children = torch.where(local >= 0, local + 1 + offsets, -1).reshape(B * (N + 1), -1)  # [B*(N+1), C]
        tokens = torch.nn.functional.pad(tree.tokens.long(), (1, 0)).reshape(-1)  # [B*(N+1)]
        return WalkLayout(tokens, torch.nn.functional.pad(children, (0, 1), value=-1), offsets.reshape(B), None, None,
                          tree.shape.max_depth, N + 1)


@dataclass
class RaggedTrees:
    """Candidates for one verify step, one tree per request, flat.

    draft_token_ids: [T] candidate tokens, request after request: request b's are
                     draft_token_ids[starts[b] : starts[b] + num_draft_tokens[b]].
    parents:         [T] each node's parent within its request (-1 = a child of the root), an
                     earlier node of the same request.
    num_draft_tokens: [B] nodes per request; 0: the request emits one token, from its root's law
                     (or its bonus token).
    draft_probs:     [R, V] or None: the law each node's children were drawn from (iid/wor),
                     rows as target_probs'.
    kind:            as CandidateTree's, shared by the batch.
    law_rows:        [T + B] or None: the row of target_probs / draft_probs that holds each global
                     node's law (module docstring); None: the tables are [T + B, V] in that order.
                     Leaves' rows are never read when bonus_token_ids is given (-1 there is fine).
    bonus_token_ids: [B] or None: the target's sample at a fully accepted path, already drawn from
                     the leaf's law (vLLM's bonus token); a leaf then emits it.
    """

    draft_token_ids: torch.Tensor
    parents: torch.Tensor
    num_draft_tokens: torch.Tensor
    draft_probs: torch.Tensor | None = None
    kind: str = "point"
    law_rows: torch.Tensor | None = None
    bonus_token_ids: torch.Tensor | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, got {self.kind!r}")
        device = self.draft_token_ids.device
        self.num_draft_tokens = integers("num_draft_tokens", self.num_draft_tokens, device)
        self.parents = integers("parents", self.parents, device)
        integers("draft_token_ids", self.draft_token_ids, device)
        for name in ("law_rows", "bonus_token_ids"):
            if getattr(self, name) is not None:
                integers(name, getattr(self, name), device)
        for name in ("draft_token_ids", "parents", "num_draft_tokens"):
            if getattr(self, name).dim() != 1:
                raise ValueError(f"{name} must be 1-D, got shape {tuple(getattr(self, name).shape)}")
        if self.kind != "point" and self.draft_probs is None:
            raise ValueError(f"kind {self.kind!r} needs draft_probs (the law children were drawn from)")
        check_counts(self.num_draft_tokens, self.draft_token_ids.shape[0])

    @property
    def batch_size(self) -> int:
        return self.num_draft_tokens.numel()

    @property
    def starts(self) -> torch.Tensor:
        """[B] offset of each request's first node in tokens."""
        return self.num_draft_tokens.cumsum(0) - self.num_draft_tokens

    def request_of(self) -> torch.Tensor:
        """[T] the request each node belongs to."""
        return _requests_and_positions(self.num_draft_tokens)[0]

    def positions(self) -> torch.Tensor:
        """[T] each node's index within its request."""
        return _requests_and_positions(self.num_draft_tokens)[1]

    @property
    def is_chains(self) -> bool:
        """Every request a chain (each node the only child of the one before it): vLLM's layout."""
        return bool((self.parents == self.positions() - 1).all())

    def roots(self) -> torch.Tensor:
        """[B] each request's root, as a global node (module docstring)."""
        return self.starts + torch.arange(self.batch_size, device=self.draft_token_ids.device)

    def global_ids(self) -> torch.Tensor:
        """[T] each node's global id: its request's root + 1 + its position."""
        request, position = _requests_and_positions(self.num_draft_tokens)
        return self.roots()[request] + 1 + position

    # ---- builders -------------------------------------------------------------------------

    @staticmethod
    def chains(draft_token_ids: torch.Tensor, num_draft_tokens, draft_probs: torch.Tensor | None,
               bonus_token_ids: torch.Tensor) -> "RaggedTrees":
        """vLLM's flat chains: the laws [T, V] hold row t = the law draft t is judged by (target)
        or was drawn from (draft), so request b's root and node i < k_b - 1 read rows
        starts[b] + 0 and starts[b] + i + 1; its leaf emits bonus_token_ids[b]."""
        counts = integers("num_draft_tokens", num_draft_tokens, draft_token_ids.device)
        T = draft_token_ids.shape[0]
        check_counts(counts, T)
        starts = counts.cumsum(0) - counts
        position = _requests_and_positions(counts)[1]  # [T] index within its chain
        request_g, position_g = _requests_and_positions(counts + 1)  # [T + B] global nodes: the root at position 0
        law_rows = torch.where(position_g < counts[request_g], starts[request_g] + position_g, -1)  # [T + B]
        return RaggedTrees(draft_token_ids, position - 1, counts, draft_probs,
                           "point" if draft_probs is None else "iid", law_rows, bonus_token_ids.reshape(-1))

    @staticmethod
    def of_rows(tree: CandidateTree, active: torch.Tensor) -> "RaggedTrees":
        """A shared-shape tree [B, N] whose inactive requests (active [B] False) have no nodes: they emit
        one token from their root's law. The laws stay where they lie ([B, N+1, V] flattened)."""
        B, N = tree.tokens.shape
        device = tree.tokens.device
        active = active.to(device)
        counts = active.long() * N  # [B]
        keep = active[:, None].expand(B, N)
        g_request, g_position = _requests_and_positions(counts + 1)  # [T + B] root at position 0
        law_rows = g_request * (N + 1) + g_position
        q = None if tree.draft_probs is None else tree.draft_probs.flatten(0, 1)
        return RaggedTrees(tree.tokens[keep], tree.parents.to(device).expand(B, N)[keep], counts, q, tree.kind,
                           law_rows)

    # ---- the walk's view ------------------------------------------------------------------

    def global_parents(self) -> torch.Tensor:
        """[T + B] each global node's parent (-1 for the roots)."""
        B, T = self.batch_size, self.draft_token_ids.shape[0]
        roots = self.roots()[self.request_of()]  # [T] each node's request's root
        parents = torch.full((T + B,), -1, dtype=torch.long, device=self.draft_token_ids.device)
        parents[self.global_ids()] = roots + 1 + self.parents  # a root child's parent: -1 + 1 + root
        return parents

    def walk_layout(self) -> WalkLayout:
        B, T, device = self.batch_size, self.draft_token_ids.shape[0], self.draft_token_ids.device
        G = T + B
        parents = self.global_parents()  # [G]
        is_node = parents >= 0
        tokens = torch.zeros(G, dtype=torch.long, device=device)
        tokens[is_node] = self.draft_token_ids.long()
        # Siblings in index order: a stable sort by parent keeps it; a child's slot is its rank in the run.
        node_ids = is_node.nonzero().squeeze(1)  # [T]
        order = torch.sort(parents[node_ids], stable=True)
        by_parent, kids = order.values, node_ids[order.indices]
        first = torch.searchsorted(by_parent, by_parent)  # [T] start of each one's run of siblings
        slot = torch.arange(T, device=device) - first
        width = int(slot.max()) + 1 if T else 1
        children = torch.full((G, width + 1), -1, dtype=torch.long, device=device)
        children[by_parent, slot] = kids
        depth = self.global_depths(parents)
        most = int(self.num_draft_tokens.max()) if B else 0
        return WalkLayout(tokens, children, self.roots(), self.law_rows,
                          None if self.bonus_token_ids is None else self.bonus_token_ids.reshape(-1).long().to(device),
                          int(depth.max()) if G else 0, most + 1)

    def global_depths(self, parents: torch.Tensor | None = None) -> torch.Tensor:
        """[T + B] each global node's depth (roots 0), by pointer jumping: log2(longest path) rounds of
        gathers, no loop over nodes. parents: global_parents(), if the caller has it already."""
        parents = self.global_parents() if parents is None else parents
        G = parents.shape[0]
        is_node = parents >= 0
        depth, jump = is_node.long(), torch.where(is_node, parents, torch.arange(G, device=parents.device))
        most = int(self.num_draft_tokens.max()) if self.batch_size else 0
        for _ in range(max(most, 1).bit_length()):
            depth, jump = depth + depth[jump], jump[jump]
        return depth

    def within_depth(self, max_depth) -> tuple["RaggedTrees", torch.Tensor]:
        """The same requests without their nodes deeper than max_depth (an int or [B]), and kept [T]: which
        nodes stay (their order, and each table row, unchanged). A whole level goes or stays, a shape fixed
        before any coin: the trees that remain are verified exactly (an engine's num_speculative_tokens)."""
        if self.bonus_token_ids is not None:
            raise ValueError("within_depth: the bonus tokens were drawn at the leaves that a cut would drop")
        device = self.draft_token_ids.device
        request = self.request_of()
        cap = depth_caps(max_depth, self.batch_size, device)  # [B]
        node_depth = self.global_depths()[self.global_ids()]  # [T]
        kept = node_depth <= cap[request]  # [T]
        counts = torch.zeros_like(self.num_draft_tokens).index_add_(0, request[kept], torch.ones_like(request[kept]))
        # a kept node's new index within its request: the kept nodes before it there
        before = torch.cumsum(kept.long(), 0) - kept.long()  # [T] kept nodes before it in the batch
        new_index = before - (torch.cumsum(counts, 0) - counts)[request]  # [T]
        parent_new = torch.where(self.parents >= 0, new_index[(self.starts[request] + self.parents).clamp_min(0)], -1)
        # Global ids grow request by request, root first: the kept ones, sorted, are the new layout's nodes.
        global_kept = torch.cat([self.roots(), self.global_ids()[kept]]).sort().values  # [T' + B]
        law_rows = global_kept if self.law_rows is None else self.law_rows[global_kept]
        return RaggedTrees(self.draft_token_ids[kept], parent_new[kept], counts, self.draft_probs, self.kind, law_rows,
                           self.bonus_token_ids), kept
