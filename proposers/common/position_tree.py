"""A tree from per-position laws: what every drafter that predicts several depths at once shares.

Medusa's heads, DFlash's block, PARD's mask tokens and P-EAGLE's parallel call all give, in one
forward, a law per depth d: logits [B, K, V], position d-1 for the tokens at depth d, whatever the
path above them (the position reads a mask there, not the drafted token). So:

- kind "point": node (r_1..r_d) takes position d's r_d-th most likely token (a choice by value,
  blind to the verifier's coins: the point rule keeps the law exact);
- kind "iid" / "wor": each node's children are drawn from position (its depth)'s processed law q
  (the sampling's temperature, top-k, top-p and min-p), and q goes to the verifier as the law of
  every child at that depth. That q is exact because a depth-d token was drawn from position d's law
  and nothing else: the law of the position, not of the drafted path (docs/design.md section 8).
  The repetition penalty is left out: it depends on the path, the draw did not. A constraint's mask does
  depend on the path, so under a grammar q is taken per node, after the mask along that node's path.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import torch

from framework.core import files
from framework.core.constraint import Constraint
from framework.core.drafting import draw_children, top_tokens
from framework.core.randomness import RandomSource
from framework.core.sampling import SamplingConfig, process_logits
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape
from framework.zoo.checkpoints import find_folder


def position_law_tree(logits: torch.Tensor, shape: TreeShape, kind: str, sampling: SamplingConfig,
                      rng: RandomSource, constraint: Constraint | None = None) -> CandidateTree:
    """logits [B, K, V] (position d-1 proposes depth d) -> the tree of `shape` (at most K deep), its
    children chosen by `kind`, with scores (each node's draft probability along its path). constraint: iid /
    wor children are drawn from the position's law after its mask along the node's own path (point trees
    are ranked as they are: the engine drops the nodes the mask forbids)."""
    if shape.num_nodes == 0:
        return CandidateTree.empty(logits.shape[0], logits.device)
    if kind == "point":
        ranks = int(shape.ranks.max()) + 1
        ranked = top_tokens(logits.flatten(0, 1), ranks).view(*logits.shape[:2], ranks)  # [B, K, R]
        tree = CandidateTree.by_rank(shape, ranked)
        probs = logits.float().softmax(-1).gather(2, ranked)  # [B, K, R]
        chosen = probs[:, shape.depth - 1, shape.ranks.to(probs.device)]  # [B, N] each node's own probability
        return CandidateTree(tree.tokens, shape, None, "point", along_paths(chosen, shape))
    cfg = replace(sampling, repetition_penalty=1.0)
    row_depth = torch.cat([torch.zeros(1, dtype=torch.long), shape.depth]).clamp_max(logits.shape[1] - 1)
    tokens = torch.zeros(logits.shape[0], shape.num_nodes, dtype=torch.long, device=logits.device)
    q = torch.empty(tokens.shape[0], shape.num_nodes + 1, logits.shape[-1], device=logits.device,
                    dtype=torch.float64 if logits.dtype == torch.float64 else torch.float32)  # [B, N+1, V]
    for rows in [torch.zeros(1, dtype=torch.long)] + [level + 1 for level in shape.levels]:  # level by level
        # row i draws the children at depth(i) + 1 from that position's law, after the constraint's mask there
        allowed = None if constraint is None else constraint.allowed(tokens, shape, rows)
        q[:, rows] = process_logits(logits[:, row_depth[rows].to(logits.device)], cfg, allowed=allowed).to(q.dtype)
        for row in rows.tolist():
            kids = shape.child_lists[row]
            if kids:
                tokens[:, kids] = draw_children(q[:, row], len(kids), kind, rng, point_mass=sampling.greedy)
    drawn = q[:, shape.parents + 1].gather(2, tokens[..., None]).squeeze(2).float()  # [B, N] each node's q
    return CandidateTree(tokens, shape, q, kind, along_paths(drawn, shape))


def along_paths(node_probs: torch.Tensor, shape: TreeShape) -> torch.Tensor:
    """node_probs [B, N] -> [B, N]: the product of the probabilities along each node's path."""
    scores = node_probs.clone()
    for level in shape.levels[1:]:
        scores[:, level] *= scores[:, shape.parents[level]]
    return scores


def shape_of(choices, depth: int) -> TreeShape:
    """The rank paths `choices` (None: a chain of `depth`), checked against the positions there are."""
    shape = TreeShape.chain(depth) if choices is None else TreeShape.from_choices([tuple(c) for c in choices])
    if shape.num_nodes == 0:
        raise ValueError("the tree needs at least one node: choices is empty")
    if shape.max_depth > depth:
        raise ValueError(f"the tree is {shape.max_depth} deep but the drafter predicts {depth} positions")
    return shape


def within(shape: TreeShape, depth: int | None) -> TreeShape:
    """The shape's levels down to `depth` (the policy's plan; None: all). Shapes are level-ordered."""
    return shape if depth is None else shape.prefix(int((shape.depth <= depth).sum()))


TREE_FILE = "position_tree.json"  # the tree searched for a drafter, beside it


def load_choices(path: str | Path, file: str = TREE_FILE, command: str = "the drafter's training experiment"):
    """The rank paths searched for the drafter at `path` (a folder, or a name in the embedded zoo)."""
    folder = find_folder(path, file) or Path(path).expanduser()
    if not (folder / file).is_file():
        raise FileNotFoundError(f"no searched tree at {folder / file}; train the drafter with `{command}`, "
                                "or give choices")
    return [tuple(c) for c in files.read_json(folder / file)["choices"]]
