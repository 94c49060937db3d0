"""Benchmark: what a verification forward costs when only some rows speculate, packed against dense.

    python -m experiments.bench_packed                      # the zoo target, conf/bench_packed.yaml
    python -m experiments.bench_packed 'batches=[16]' 'nodes=[15]'

B rows (each its own prompt of `prompt_tokens`, so each row its own context) verify a tree of N nodes
(breadth-first binary); k of them speculate. Dense: every row runs its root and N nodes ([B, 1+N]), as a row kept
from speculating did before packing. Packed: the k rows' nodes and every root (k(1+N) + B - k inputs in one
sequence, framework/lm/packing.py). Both are timed call by call, interleaved, at the same thread count; the
figure is the median, and the ratio dense / packed is the one to quote.
"""

from __future__ import annotations

import statistics
import time

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape
from framework.lm.target import HFTarget
from measurement.common import torch_threads, write_json


def timed(target: HFTarget, tree: CandidateTree, speculating: torch.Tensor | None) -> float:
    root = torch.zeros(tree.tokens.shape[0], dtype=torch.long, device=target.device)
    start = time.perf_counter()
    target.forward_tree(root, tree, speculating=speculating)
    seconds = time.perf_counter() - start
    target.lm.drop_pending()
    return seconds


@hydra.main(config_path="../conf", config_name="bench_packed", version_base="1.3")
def main(cfg: DictConfig) -> None:
    rows = []
    with torch_threads(cfg.threads), torch.no_grad():
        target = HFTarget(instantiate(cfg.target))
        vocab = target.vocab_size
        print("| rows B | nodes N | speculating k | dense (ms) | packed (ms) | dense / packed |\n"
              "|---:|---:|---:|---:|---:|---:|")
        for B in cfg.batches:
            prompts = torch.randint(0, vocab, (B, cfg.prompt_tokens), generator=torch.Generator().manual_seed(0))
            target.prefill(prompts)
            for N in cfg.nodes:
                tree = CandidateTree(torch.zeros(B, N, dtype=torch.long), TreeShape.full(2, 7).parents[:N])
                for k in sorted({max(0, int(round(B * share))) for share in cfg.shares}):
                    flags = torch.arange(B) < k
                    times = {"dense": [], "packed": []}
                    for rep in range(cfg.repeats + 1):
                        for way, speculating in (("dense", None), ("packed", flags)):
                            seconds = timed(target, tree, speculating)
                            if rep:
                                times[way].append(seconds)
                    dense, packed = (statistics.median(times[w]) * 1e3 for w in ("dense", "packed"))
                    rows.append({"batch": B, "nodes": N, "speculating": k, "dense_ms": dense, "packed_ms": packed,
                                 "ratio": dense / packed})
                    print(f"| {B} | {N} | {k} | {dense:.1f} | {packed:.1f} | {dense / packed:.2f}x |", flush=True)
    write_json(cfg.output_dir, "bench_packed.json", {"threads": cfg.threads, "rows": rows})


if __name__ == "__main__":
    main()
