"""How EAGLE grows its draft tree, given a way to read nodes through the head.

`read(nodes, parents, tokens, depth)` runs the head on the listed nodes (each one's parent read
before it, -1 = the root) and returns their logits [B, M, V]. Both trees choose children by the
draft's own values only, never by the verifier's coins, so they are `point` trees: the shared
verifier's point rule keeps the output law the target's.

- static (EAGLE-1): a fixed tree of rank paths ("choices", searched from measured acceptance);
  node (r_1..r_d) takes the r_d-th most likely token of its parent's draft law.
- dynamic (EAGLE-2): depth 1 takes the root's top_k tokens; at each further depth the top_k
  nodes of the previous depth by cumulative draft log-probability (the beam) are read and each
  gets its top_k children; finally every drafted node is reranked by cumulative log-probability
  and the best `budget` are kept. A child's score never exceeds its parent's, and ties go to the
  shallower node, so the kept set is a tree. For B > 1 rows the tree's shape is shared (docs/design.md
  section 3): scores are summed over rows; for one row this is EAGLE-2's own rule.
"""

from __future__ import annotations

from typing import Callable

import torch

from framework.core.tree_shape import TreeShape

Reader = Callable[[list[int], list[int], torch.Tensor, list[int]], torch.Tensor]


def static_tree(read: Reader, root_logits: torch.Tensor,
                shape: TreeShape) -> tuple[torch.Tensor, TreeShape, torch.Tensor]:
    """root_logits [B, V] -> (tokens [B, N], the shape, scores [B, N]: each node's draft probability along its path)
    of the given tree of ranks."""
    parents, ranks, depth = shape.parents.tolist(), shape.ranks.tolist(), shape.depth.tolist()
    width = max(ranks) + 1
    tokens: list[torch.Tensor] = [None] * len(parents)  # type: ignore[list-item]
    scores: list[torch.Tensor] = [None] * len(parents)  # type: ignore[list-item]
    top = {-1: ranked_children(root_logits, width)}  # per read node: its ranked children and their probabilities
    for level in range(1, max(depth) + 1):
        for i in (i for i in range(len(parents)) if depth[i] == level):
            children, probs = top[parents[i]]
            tokens[i] = children[:, ranks[i]]
            scores[i] = probs[:, ranks[i]] * (scores[parents[i]] if parents[i] >= 0 else 1.0)
        readers = sorted({p for i, p in enumerate(parents) if depth[i] == level + 1})
        if readers:
            logits = read(readers, [parents[i] for i in readers], torch.stack([tokens[i] for i in readers], 1),
                          [level] * len(readers))
            children, probs = ranked_children(logits, width)  # [B, M, width]
            top.update({node: (children[:, m], probs[:, m]) for m, node in enumerate(readers)})
    return torch.stack(tokens, dim=1), shape, torch.stack(scores, dim=1)


def ranked_children(logits: torch.Tensor, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """logits [..., V] -> the `width` most likely tokens [..., width] and their draft probabilities."""
    probs, tokens = logits.float().softmax(-1).topk(width, dim=-1)
    return tokens, probs


def dynamic_tree(read: Reader, root_logits: torch.Tensor, top_k: int, depth: int,
                 budget: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """root_logits [B, V] -> (tokens [B, N], parents [N], scores [B, N]: each node's draft probability along
    its path) with N <= budget (EAGLE-2)."""
    score, token = root_logits.float().log_softmax(-1).topk(top_k, dim=-1)  # [B, k]
    parents, tokens, scores = [torch.full((top_k,), -1)], [token], [score]  # per depth: [n], [B, n], [B, n]
    levels = [torch.ones(top_k, dtype=torch.long)]
    beam, beam_parents, count = torch.arange(top_k), parents[0], top_k  # node ids of the beam, their parents
    for d in range(2, depth + 1):
        logits = read(beam.tolist(), beam_parents.tolist(), token, [d - 1] * beam.numel())
        logp, child = logits.float().log_softmax(-1).topk(top_k, dim=-1)  # [B, M, k]
        cumulative = (score[..., None] + logp).flatten(1)  # [B, M k]
        parents.append(beam.repeat_interleave(top_k))
        tokens.append(child.flatten(1))
        scores.append(cumulative)
        levels.append(torch.full((cumulative.shape[1],), d))
        # by the batch's summed score
        pick = cumulative.sum(0).topk(min(top_k, cumulative.shape[1])).indices.sort().values.cpu()
        beam, beam_parents = count + pick, parents[-1][pick]
        token, score = tokens[-1][:, pick], cumulative[:, pick]
        count += cumulative.shape[1]
    parents_all, level = torch.cat(parents), torch.cat(levels)
    shared = torch.cat(scores, dim=1).sum(0)  # [n]
    order = torch.arange(count)
    order = order[level[order].argsort(stable=True)]  # ties: the shallower node first (a parent before its child)
    order = order[(-shared[order]).argsort(stable=True)]
    kept = order[:budget].sort().values  # node ids in creation order: topological
    index = torch.full((count,), -1, dtype=torch.long)
    index[kept] = torch.arange(kept.numel())
    kept_parents = parents_all[kept]
    kept_parents = torch.where(kept_parents >= 0, index[kept_parents.clamp_min(0)], -1)
    kept = kept.to(root_logits.device)
    return torch.cat(tokens, dim=1)[:, kept], kept_parents, torch.cat(scores, dim=1)[:, kept].exp()
