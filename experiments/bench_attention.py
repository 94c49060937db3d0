"""Tree attention on a GPU: the Triton kernel against SDPA with a dense mask and eager attention.

    python -m experiments.bench_attention                 # bf16, 32 query / 8 KV heads, head dim 128
    python -m experiments.bench_attention json=out.json

Rows: prefixes of 1k, 8k and 32k tokens x trees of 16, 64 and 128 nodes (random topologies,
batch 1). Each method is timed with CUDA events (median of reps after warmup calls) in the
same run; bandwidth counts the bytes that must move at least once (K and V of the whole
sequence, Q and the output), so it is comparable with the HBM peak (peak_gbs).
Needs CUDA; prints a clear message and exits 2 without it. Runs in about a minute on an H200.
"""

from __future__ import annotations

import statistics
import sys

import hydra
import torch
from omegaconf import DictConfig

from framework.core import files
from framework.core.tree_mask import TreeMask
from framework.core.tree_shape import ancestor_mask


def random_tree(nodes: int, generator: torch.Generator) -> torch.Tensor:
    parents = [int(torch.randint(-1, i, (1,), generator=generator)) for i in range(nodes)]
    return ancestor_mask(torch.tensor(parents, dtype=torch.long))  # [M, M]


def timed(fn, warmup: int, reps: int) -> float:
    """Median milliseconds of fn() by CUDA events."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def eager(q, k, v, dense, scale, group):
    k, v = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    scores = (q @ k.transpose(-1, -2)).float() * scale
    scores = scores.masked_fill(~dense, float("-inf"))
    return (torch.softmax(scores, -1).to(q.dtype) @ v)


@hydra.main(config_path="../conf", config_name="bench_attention", version_base="1.3")
def main(args: DictConfig) -> None:
    if not torch.cuda.is_available():
        print("bench_attention needs a CUDA GPU; none is visible here.", file=sys.stderr)
        raise SystemExit(2)
    from framework.lm.tree_attention_triton import tree_attention_triton

    device, dtype = torch.device("cuda"), torch.bfloat16
    g = torch.Generator().manual_seed(0)
    group, D = args.q_heads // args.kv_heads, args.head_dim
    scale = D**-0.5
    rows = []
    print(f"{torch.cuda.get_device_name()}  bf16  Hq={args.q_heads} Hkv={args.kv_heads} D={D}  batch 1\n")
    print("| prefix | tree nodes | triton ms | sdpa (dense mask) ms | eager ms | triton GB/s | % of peak | "
          "sdpa / triton | max abs diff vs sdpa |")
    print("|---|---|---|---|---|---|---|---|---|")
    for prefix in args.prefixes:
        for nodes in args.trees:
            M, S = nodes + 1, prefix + nodes + 1
            q = torch.randn(1, args.q_heads, M, D, device=device, dtype=dtype)
            k = torch.randn(1, args.kv_heads, S, D, device=device, dtype=dtype)
            v = torch.randn(1, args.kv_heads, S, D, device=device, dtype=dtype)
            mask = TreeMask(torch.ones(1, prefix, dtype=torch.bool, device=device), random_tree(nodes, g).to(device))
            dense = mask.dense()  # built once, outside the timed region, for the baselines
            t_triton = timed(lambda: tree_attention_triton(q, k, v, mask, scale), args.warmup, args.reps)
            t_sdpa = timed(lambda: torch.nn.functional.scaled_dot_product_attention(
                q, k, v, attn_mask=dense, scale=scale, enable_gqa=True), args.warmup, args.reps)
            t_eager = timed(lambda: eager(q, k, v, dense, scale, group), args.warmup, args.reps)
            diff = (tree_attention_triton(q, k, v, mask, scale).float()
                    - torch.nn.functional.scaled_dot_product_attention(
                        q, k, v, attn_mask=dense, scale=scale, enable_gqa=True).float()).abs().max().item()
            moved = (k.numel() + v.numel() + 2 * q.numel()) * q.element_size()
            gbs = moved / (t_triton * 1e-3) / 1e9
            row = {"prefix": prefix, "nodes": nodes, "triton_ms": t_triton, "sdpa_ms": t_sdpa, "eager_ms": t_eager,
                   "triton_gbs": gbs, "peak_frac": gbs / args.peak_gbs, "sdpa_over_triton": t_sdpa / t_triton,
                   "max_abs_diff": diff}
            rows.append(row)
            print(f"| {prefix} | {nodes} | {t_triton:.3f} | {t_sdpa:.3f} | {t_eager:.3f} | {gbs:.0f} | "
                  f"{100 * row['peak_frac']:.0f}% | {row['sdpa_over_triton']:.2f}x | {diff:.1e} |", flush=True)
    if args.json:
        files.write_json(args.json, rows)
    return


if __name__ == "__main__":
    main()
