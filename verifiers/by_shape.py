"""Rules written for one shared-shape tree (block, traversal) on ragged batches: requests grouped by shape.

A rule such as block verification judges a CandidateTree, whose shape the batch shares. A ragged batch
(RaggedTrees: vLLM's chains of different lengths, SGLang's trees of different shapes) is verified group
by group: the requests of one shape become one CandidateTree, their laws gathered from the tables, and
the rule runs on it with the rows of the batch's random source that belong to them. Each request is
then judged exactly as it would be alone (the rule's proof is per request), and the output has the
ragged batch's own layout. A leaf with a given bonus token (vLLM's) reads a point mass on it, so the
rule's draw there returns the bonus.
"""

from __future__ import annotations

from collections import defaultdict

import torch

from framework.core.ragged_tree import RaggedTrees
from framework.core.randomness import RandomSource
from framework.core.tree import CandidateTree
from framework.core.verification import Verification


class RowSource:
    """The rows `rows` of a batch's random source (batch_size rows in all): every draw is asked of the
    whole batch and the group's rows kept, so any source (the harness's enumerating one included) serves
    a group unchanged; the other rows' draws are point masses, or unused uniforms."""

    def __init__(self, source: RandomSource, rows: list[int], batch_size: int):
        self.source, self.rows, self.batch_size = source, rows, batch_size

    def uniform(self, shape, device="cpu"):
        return self.source.uniform((self.batch_size, *tuple(shape)[1:]), device)[self.rows]

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        full = probs.new_zeros((self.batch_size, *probs.shape[1:]))
        full[..., 0] = 1.0  # the other rows: one possible index, nothing drawn
        full[self.rows] = probs
        return self.source.categorical(full)[self.rows]


def shape_groups(trees: RaggedTrees) -> dict[tuple[int, ...], list[int]]:
    """Parents tuple (the request's shape) -> the requests that have it, in batch order."""
    counts, parents = trees.num_draft_tokens.tolist(), trees.parents.tolist()
    groups: dict[tuple[int, ...], list[int]] = defaultdict(list)
    start = 0
    for b, k in enumerate(counts):
        groups[tuple(parents[start : start + k])].append(b)
        start += k
    return dict(groups)


def _laws(table: torch.Tensor, rows: torch.Tensor, leaf_atoms: torch.Tensor | None) -> torch.Tensor:
    """[G, N+1, V]: table's rows `rows` [G, N+1]; where leaf_atoms [G, N+1] >= 0, a point mass on it; a row
    the table does not hold (-1: a leaf's, never read) a uniform placeholder."""
    V = table.shape[-1]
    laws = table.new_full((*rows.shape, V), 1.0 / V)
    held = rows >= 0
    laws[held] = table[rows[held]]
    if leaf_atoms is not None:
        atom = leaf_atoms >= 0
        laws[atom] = torch.nn.functional.one_hot(leaf_atoms[atom], V).to(table.dtype)
    return laws


def verify_by_shape(rule, trees: RaggedTrees, target_probs: torch.Tensor, rng: RandomSource,
                    eos_token_id: int | None = None) -> Verification:
    """`rule` (a CandidateTree verifier) on each group of same-shape requests of `trees`."""
    layout_width = int(trees.num_draft_tokens.max()) + 1 if trees.batch_size else 1
    B, device = trees.batch_size, target_probs.device
    out = torch.full((B, layout_width), -1, dtype=torch.long, device=device)
    num_accepted = torch.zeros(B, dtype=torch.long, device=device)
    paths: list[tuple[torch.Tensor, torch.Tensor]] = []
    starts, roots = trees.starts.to(device), trees.roots().to(device)  # [B], [B]
    for shape, requests in shape_groups(trees).items():
        N = len(shape)
        index = torch.tensor(requests, device=device)
        nodes = starts[index][:, None] + torch.arange(N, device=device)  # [G, N] flat node ids
        global_ids = roots[index][:, None] + torch.arange(N + 1, device=device)  # [G, N+1]: root, then nodes
        rows = global_ids if trees.law_rows is None else trees.law_rows.to(device)[global_ids]
        leaf_atoms = None
        if trees.bonus_token_ids is not None:  # a leaf emits the bonus: its law is a point mass on it
            is_leaf = torch.ones(N + 1, dtype=torch.bool, device=device)
            is_leaf[[parent + 1 for parent in shape]] = False
            bonus = trees.bonus_token_ids.reshape(-1).long().to(device)[index]  # [G]
            leaf_atoms = torch.where(is_leaf[None, :], bonus[:, None], -1)  # [G, N+1]
        p = _laws(target_probs, rows, leaf_atoms)
        q = None if trees.draft_probs is None else _laws(trees.draft_probs, rows, None)
        tree = CandidateTree(trees.draft_token_ids.to(device)[nodes].long(), list(shape), q, trees.kind)
        result = rule(tree, p, RowSource(rng, requests, B), eos_token_id)
        out[index, : result.tokens.shape[1]] = result.tokens
        num_accepted[index] = result.num_accepted
        paths.append((index, result.path))
    path = torch.full((B, max((p.shape[1] for _, p in paths), default=0)), -1, dtype=torch.long, device=device)
    for index, group_path in paths:
        path[index, : group_path.shape[1]] = group_path
    return Verification(out, num_accepted, path)
