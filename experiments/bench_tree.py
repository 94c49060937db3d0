"""What a step pays for its tree's facts: a shape built fresh each step vs a static shape built once.

    python -m experiments.bench_tree                 # 200 steps per shape, one thread

Per step the loop reads the tree's depths and ancestor mask (the target's forward), the mask again
(the sampling law along each path, with penalties), the children table and the path table (the
verifier). A fresh shape (a dynamic tree, EAGLE-2's) computes them once per step; a proposer with a
static shape (a chain, Medusa, EAGLE-1, the draft model's tree) builds its TreeShape once, and every
step reuses its views. Both are timed side by side in one run.
"""

from __future__ import annotations

import time

import hydra
import torch
from omegaconf import DictConfig

from framework.core.sampling import seen_along_tree
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape

SHAPES = {"chain 4": TreeShape.chain(4), "binary, 2 deep (6 nodes)": TreeShape.full(2, 2),
          "binary, 5 deep (62 nodes)": TreeShape.full(2, 5)}


def step_facts(tree: CandidateTree, seen: torch.Tensor) -> None:
    """The views one loop step reads."""
    tree.depth(), tree.ancestor_mask(), tree.shape.children, tree.shape.path_table, tree.shape.max_depth
    seen_along_tree(seen, tree.tokens, tree.shape)


def per_step_ms(make_tree, seen: torch.Tensor, steps: int = 200) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        step_facts(make_tree(), seen)
    return (time.perf_counter() - start) / steps * 1e3


@hydra.main(config_path="../conf", config_name="bench_tree", version_base="1.3")
def main(args: DictConfig) -> None:
    torch.set_num_threads(args.threads)
    seen = torch.zeros(1, 64, dtype=torch.bool)
    print("| tree | fresh shape each step (ms) | static shape (ms) | ratio |\n|---|---:|---:|---:|")
    for name, shape in SHAPES.items():
        tokens = torch.zeros(1, shape.num_nodes, dtype=torch.long)
        fresh = per_step_ms(lambda: CandidateTree(tokens, shape.parents.clone()), seen, args.steps)
        static = per_step_ms(lambda: CandidateTree(tokens, shape), seen, args.steps)
        print(f"| {name} | {fresh:.3f} | {static:.3f} | {fresh / static:.1f}x |")


if __name__ == "__main__":
    main()
