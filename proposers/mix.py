"""Several proposers' trees merged into one: identical paths deduplicated, nodes under a budget.

Why the merged tree is lossless: each part proposes from the committed state and its own draws,
before the verifier draws any coin of this step. The merge (tries, scores, the budget cut) looks
only at those candidates. So the merged set of children at every node is fixed before, and
independently of, the verifier's coins: exactly the condition of the point rule (docs/design.md section
4), whatever kind each part declared. The merged tree is therefore `point`, and the one verifier
keeps the target's law. (A part's own draft probabilities are dropped: the point rule needs none.)

Scores: each root-to-leaf path of part j weighs weights[j]; a node scores the summed weight of
the paths through it, so a path proposed by several parts counts more, and the `budget` best
nodes stay (framework/core/path_tree.py). Each part commits with its own view of the step: the
longest accepted prefix that is one of its nodes, and the true accepted count and tokens.
Side rows (lookahead) of the parts ride along when they see only the tree's root.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Mapping, Sequence

import torch

from framework.core.path_tree import WeightedPaths, node_token_paths, to_depth, tree_from_paths
from framework.core.proposer import DecodeState, SideRowProposer
from framework.core.side_rows import SideRows
from framework.core.tree import CandidateTree
from framework.core.verification import Verification


class MixProposer:
    def __init__(self, parts: Sequence | Mapping, budget: int = 64, weights: Sequence[float] | None = None):
        """parts: proposers, or factories of them (Hydra `_partial_` configs: a fresh part per mix),
        as a list or a mapping from names; weights: one per part, in that order."""
        parts = list(parts.values()) if isinstance(parts, Mapping) else list(parts)
        if not parts:
            raise ValueError("a mix needs at least one part")
        if budget < 1:
            raise ValueError(f"budget must be >= 1, got {budget}")
        self.parts = [part() if callable(part) and not hasattr(part, "propose") else part for part in parts]
        self.weights = [1.0] * len(self.parts) if weights is None else [float(w) for w in weights]
        if len(self.weights) != len(self.parts) or min(self.weights) <= 0:
            raise ValueError(f"weights must be one positive number per part, got {list(self.weights)} "
                             f"for {len(self.parts)} parts")
        self.budget = budget
        self.gather_layers()
        self.couples_rows = True  # one merged shape for the rows
        self.trees: list[CandidateTree] = []
        self.own: list[torch.Tensor] = []  # per part [B, N]: its node under each merged node (same_path)
        self.side_parts: list[tuple[int, int]] = []  # (part index, side rows) of this step

    def gather_layers(self) -> None:
        """Every part's target layers, each once; a part reads its own through layer_index."""
        layers: list[int] = []
        for part in self.parts:
            layers += [layer for layer in part.hidden_layers if layer not in layers]
        self.hidden_layers = tuple(layers)
        self.layer_index = [[layers.index(layer) for layer in part.hidden_layers] for part in self.parts]

    def prefill(self, input_ids: torch.Tensor, target) -> None:
        for part in self.parts:
            part.prefill(input_ids, target)
        self.gather_layers()  # a part may settle its layers against the target at prefill

    def part_state(self, state: DecodeState, j: int) -> DecodeState:
        """The state with the target's hidden states cut to the layers part j asked for."""
        if state.target_hidden is None or list(self.layer_index[j]) == list(range(len(self.hidden_layers))):
            return state
        if not self.layer_index[j]:  # it reads none
            return replace(state, target_hidden=None, committed_hidden=None, committed_count=None)
        index = torch.tensor(self.layer_index[j], dtype=torch.long, device=state.target_hidden.device)
        return replace(state, target_hidden=state.target_hidden.index_select(1, index),
                       committed_hidden=state.committed_hidden.index_select(2, index))

    def propose(self, state: DecodeState) -> CandidateTree:
        self.trees = [part.propose(self.part_state(state, j)) for j, part in enumerate(self.parts)]
        if not any(tree.num_nodes for tree in self.trees):  # a plain step, or no part found anything: nothing to merge
            B, device = state.root.shape[0], state.root.device
            self.own = [torch.zeros(B, 0, dtype=torch.long, device=device) for _ in self.parts]
            self.tree = CandidateTree.empty(B, device)
            return self.tree
        part_paths = [node_token_paths(tree) for tree in self.trees]  # [B, N_j, D_j] per part
        merged = tree_from_paths(WeightedPaths.cat([leaf_paths(tree, paths, weight) for tree, paths, weight
                                                    in zip(self.trees, part_paths, self.weights)]),
                                 self.budget, state.root.device)
        merged_paths = node_token_paths(merged)  # [B, N, D]
        # own[j][b, i]: part j's node with the token path of merged node i, -1 if it proposed none
        # (read again at commit)
        self.own = [same_path(merged_paths, paths) for paths in part_paths]
        self.tree = CandidateTree(merged.tokens, merged.shape, None, "point", self.merged_scores(merged))
        return self.tree

    def merged_scores(self, merged: CandidateTree) -> torch.Tensor:
        """[B, N] each merged node's best score among the parts that proposed it (a part without scores
        offers its share of the merged weight)."""
        if not merged.num_nodes:
            return merged.scores
        scores = merged.scores
        for tree, own in zip(self.trees, self.own):
            if tree.scores is None or not tree.num_nodes:
                continue
            offered = tree.scores.gather(1, own.clamp_min(0)).to(scores.dtype)  # [B, N]
            scores = torch.maximum(scores, torch.where(own >= 0, offered, 0.0))
        return scores

    def side_rows(self, tree: CandidateTree) -> SideRows | None:
        parts = []
        self.side_parts = []
        for j, (part, own) in enumerate(zip(self.parts, self.trees)):
            side = part.side_rows(own) if isinstance(part, SideRowProposer) else None
            if side is None:
                continue
            if bool(side.sees_tree[:, 1:].any()):
                raise ValueError(f"{type(part).__name__}'s side rows see its own tree nodes: "
                                 "a mix can only carry side rows that see the root")
            parts.append(side)
            self.side_parts.append((j, side.num_rows))
        if not parts:
            return None
        S, offsets = sum(p.num_rows for p in parts), 0
        sees_side = torch.zeros(S, S, dtype=torch.bool)
        for p in parts:  # each part's rows see only their own rows
            sees_side[offsets : offsets + p.num_rows, offsets : offsets + p.num_rows] = p.sees_side.cpu()
            offsets += p.num_rows
        sees_tree = torch.zeros(S, tree.num_nodes + 1, dtype=torch.bool)
        sees_tree[:, 0] = True
        return SideRows(torch.cat([p.tokens for p in parts], dim=1), torch.cat([p.depth.cpu() for p in parts]),
                        sees_tree, sees_side)

    def observe_side(self, logits: torch.Tensor) -> None:
        start = 0
        for j, rows in self.side_parts:
            self.parts[j].observe_side(logits[:, start : start + rows])
            start += rows

    def commit(self, result: Verification) -> None:
        for part, own in zip(self.parts, self.own):
            part.commit(part_view(result, own))

    def select(self, rows: torch.Tensor) -> None:
        for part in self.parts:
            part.select(rows)

    def join(self, other: MixProposer) -> None:
        for part, theirs in zip(self.parts, other.parts):
            part.join(theirs)


def leaf_paths(tree: CandidateTree, paths: torch.Tensor, weight: float) -> WeightedPaths:
    """A part's root-to-leaf token paths (paths [B, N, D]: every node's), each of weight `weight`."""
    leaves = torch.ones(tree.num_nodes, dtype=torch.bool)
    leaves[tree.parents[tree.parents >= 0]] = False
    chosen = paths[:, leaves.to(paths.device)].cpu()  # [B, leaves, D]
    return WeightedPaths(chosen, torch.full(chosen.shape[:2], float(weight), dtype=torch.float64))


def same_path(merged: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
    """merged [B, N, D], own [B, M, D'] token paths (-1 padded) -> [B, N]: the node of `own` with each merged
    node's path, -1 where none (a tree holds a path once)."""
    if own.shape[1] == 0:
        return torch.full(merged.shape[:2], -1, dtype=torch.long, device=merged.device)
    depth = max(merged.shape[2], own.shape[2])
    equal = (to_depth(merged, depth)[:, :, None]
             == to_depth(own, depth).to(merged.device)[:, None]).all(dim=-1)  # [B, N, M]
    return torch.where(equal.any(dim=-1), equal.long().argmax(dim=-1), -1)


def part_view(result: Verification, own: torch.Tensor) -> Verification:
    """The step as one part sees it: its nodes along the accepted path (the longest prefix of it
    in its own tree, -1 after), with the true accepted count and tokens. own [B, N]: same_path's."""
    mapped = torch.where(result.path >= 0, own.to(result.path.device).gather(1, result.path.clamp_min(0)), -1)
    held = (mapped >= 0).long().cumprod(dim=1).bool()  # up to the first node the part lacks
    return Verification(result.tokens, result.num_accepted, torch.where(held, mapped, -1))
