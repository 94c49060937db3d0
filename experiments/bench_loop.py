"""Benchmark: the decoding loop's own overhead, tree-forward cost, and draft-model speedup (CPU).

    python -m experiments.bench_loop                       # defaults below; ~25 s with threads 1 on 2 cores
    python -m experiments.bench_loop threads=1 json=loop.json   # on a busy shared machine

Torch's default thread count collapses when other processes hold the cores (forwards 30-100x
slower, ms per call swinging run to run): on a shared machine pass threads 1.

Models: the embedded zoo by default (target / draft: zoo names or any local HF checkpoint
folders, loaded in float32), with the first prompt tokens of the first held-out stdlib file as
the prompt. random uses random-weight llamas instead (vocab, hidden, layers; the draft has
draft_layers; matrices drawn with std init_std so that next-token laws are peaked) and a
random prompt. "self-draft" drafts with an exact copy of the target (acceptance ~100%): the best
case for the machinery, with a draft as costly as the target.

0. Forward cost of the draft against the target: ms per one-token forward (a plain decoding
   step after a tree_prompt token prefill), interleaved; the ratio is the figure that decides
   whether a draft can pay (deployed drafts cost 0.05-0.1 of their target; goal <= 1/8).
1. Loop time outside model forwards: verify_s + other_s per step (goal <= 10% of the step).
2. `forward_tree` ms per call after a tree_prompt token prefill, for the first N nodes of a
   full binary tree (breadth first), N = 0 (root alone) .. 64; ratio to N = 1 (root + 1 node).
   After each call the pending slots are dropped, so every call sees the same cache.
3. Tokens per forward and wall-clock speedup (median of repeats runs) of a depth-4 iid chain
   against plain decoding of the same target, at temperature 1 and greedy.
"""

from __future__ import annotations

import statistics
import time

import hydra
import torch
from omegaconf import DictConfig, OmegaConf

from engine.loop import generate
from framework.core import files
from framework.core.sampling import SamplingConfig
from framework.core.tree import CandidateTree
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from framework.zoo.checkpoints import load_causal_lm
from measurement.common import heldout_prompt
from proposers.draft_model import DraftModelProposer
from proposers.search.tree_cost import forward_tree_cost, prefilled, time_forwards

TREE_SIZES = (0, 1, 8, 32, 64)


def random_model(args, layers: int, seed: int):
    max_positions = max(args.prompt + args.new_tokens + args.depth + 2, args.tree_prompt + 8)
    return tiny_random_model("llama", args.vocab, args.hidden, layers, args.heads, args.kv_heads,
                             max_positions, seed=seed, dtype="float32", init_std=args.init_std)


def table(header: list[str], rows: list[list]) -> str:
    fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else str(v)
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(fmt(v) for v in row) + " |" for row in rows])


def run_generation(args, target_model, draft_model, sampling: SamplingConfig, prompt, seed: int) -> dict:
    """One generate call on fresh adapters; wall clock plus the engine's split, per step."""
    target = HFTarget(target_model)
    proposer = None if draft_model is None else DraftModelProposer(draft_model, depth=args.depth, kind="iid")
    start = time.perf_counter()
    out = generate(target, proposer, prompt, args.new_tokens, sampling, seed=seed)
    wall = time.perf_counter() - start
    s = out.stats.summary()
    outside = [st.verify_s + st.other_s for st in out.stats.steps]
    share = [o / (st.draft_s + st.target_s + o) for o, st in zip(outside, out.stats.steps)]
    return {"wall_s": wall, "untimed_s": wall - s["prefill_s"] - s["loop_s"],
            "outside_p50_ms": 1e3 * statistics.median(outside), "outside_p50_share": statistics.median(share), **s}


def bench_generation(args, target_model, drafts: dict, prompt) -> dict:
    """results[temperature][setting] = list of run dicts; settings interleaved run by run.
    drafts: setting -> draft model (None = plain decoding)."""
    results = {}
    for temperature in (1.0, 0.0):
        sampling = SamplingConfig(temperature=temperature)
        runs = {name: [] for name in drafts}
        for r in range(args.repeats + 1):  # round 0 warms up and is not recorded
            for name, draft in drafts.items():
                run = run_generation(args, target_model, draft, sampling, prompt, args.seed + r)
                if r > 0:
                    runs[name].append(run)
        results[temperature] = runs
    return results


def median_run(runs: list[dict]) -> dict:
    """The run with the median wall clock (keeps every figure of one real run together)."""
    return sorted(runs, key=lambda r: r["wall_s"])[len(runs) // 2]


def bench_tree_forward(args, target_model) -> dict:
    """ms per forward_tree for each tree size, after the same prefill."""
    return forward_tree_cost(target_model, TREE_SIZES, args.tree_prompt, args.tree_repeats, args.seed)


def bench_forward_ratio(args, target_model, draft_model) -> dict:
    """ms per one-token forward (a plain decoding step) of target and draft."""
    empty = CandidateTree.chain(torch.zeros(1, 0, dtype=torch.long))
    ms = time_forwards({"target": (*prefilled(target_model, args.tree_prompt, args.seed), empty),
                        "draft": (*prefilled(draft_model, args.tree_prompt, args.seed), empty)}, args.tree_repeats)
    return {**ms, "ratio": ms["draft"] / ms["target"]}


@hydra.main(config_path="../conf", config_name="bench_loop", version_base="1.3")
def main(args: DictConfig) -> None:
    if args.threads:
        torch.set_num_threads(args.threads)
    if args.random:
        gen = torch.Generator().manual_seed(args.seed + 1)
        prompt = torch.randint(args.vocab, (1, args.prompt), generator=gen)
        target_model = random_model(args, args.layers, args.seed)
        drafts = {"plain": None,
                  "draft (indep.)": random_model(args, args.draft_layers, args.seed + 100),
                  "self-draft": random_model(args, args.layers, args.seed)}  # same seed: identical weights
        described = (f"random llama V={args.vocab} H={args.hidden} L={args.layers} heads={args.heads}/{args.kv_heads} "
                     f"init_std={args.init_std}; draft: {args.draft_layers} layer(s); random prompt")
    else:
        target_model = load_causal_lm(args.target)
        drafts = {"plain": None, "draft (indep.)": load_causal_lm(args.draft),
                  "self-draft": load_causal_lm(args.target)}
        prompt = heldout_prompt(target_model, args.prompt)
        described = (f"{args.target} ({target_model.config.num_hidden_layers} layers), draft {args.draft} "
                     f"({drafts['draft (indep.)'].config.num_hidden_layers} layer(s)); held-out prompt")
    assert all(torch.equal(a, b) for a, b in zip(target_model.parameters(), drafts["self-draft"].parameters()))
    print(f"target: {described}; float32; prompt {prompt.shape[1]} tokens, {args.new_tokens} new tokens, "
          f"depth {args.depth} iid; torch threads {torch.get_num_threads()}\n")
    print("Per-step columns are means over the steps of the median-wall run; p50 columns are medians over its steps.\n")

    gen_results = bench_generation(args, target_model, drafts, prompt)
    tree_ms = bench_tree_forward(args, target_model)
    ratio = bench_forward_ratio(args, target_model, drafts["draft (indep.)"])

    print(f"## 0. Forward cost: draft / target = {ratio['ratio']:.3f} (1/{1 / ratio['ratio']:.1f}; goal <= 1/8)\n")
    print(table(["model", "layers", f"ms per one-token forward (median of {args.tree_repeats}, after "
                 f"{args.tree_prompt} tokens)"],
                [["target", target_model.config.num_hidden_layers, ratio["target"]],
                 ["draft", drafts["draft (indep.)"].config.num_hidden_layers, ratio["draft"]]]))
    print()

    print("## 1. Loop time outside model forwards (temperature 1.0)\n")
    rows = []
    for name, runs in gen_results[1.0].items():
        s = median_run(runs)
        per = lambda k: 1e3 * s[k] / s["steps"]
        outside = per("verify_s") + per("other_s")
        rows.append([name, s["steps"], per("loop_s"), per("draft_s"), per("target_s"), per("verify_s"),
                     per("other_s"), outside, f"{100 * outside / per('loop_s'):.1f}%", s["outside_p50_ms"],
                     f"{100 * s['outside_p50_share']:.1f}%", 1e3 * s["untimed_s"]])
    print(table(["setting", "steps", "step ms", "draft ms", "target ms", "verify ms", "other ms",
                 "verify+other ms", "% of step (goal <= 10%)", "p50 verify+other ms", "p50 % of step",
                 "untimed ms (whole run)"], rows))
    print("\n(untimed: wall clock of generate outside prefill and the timed steps, e.g. emitting tokens)")

    print(f"\n## 2. forward_tree cost after a {args.tree_prompt}-token prefill "
          f"(median of {args.tree_repeats}; N nodes + the root; N = 0 is plain decoding)\n")
    print(table(["tree nodes N", "rows in forward", "ms per call", "ratio to N = 1"],
                [[n, n + 1, ms, ms / tree_ms[1]] for n, ms in tree_ms.items()]))

    print(f"\n## 3. Draft-model chain (depth {args.depth}, iid) vs plain decoding "
          f"(median wall of {args.repeats} runs, {args.new_tokens} tokens)\n")
    rows = []
    for temperature, runs in gen_results.items():
        plain_wall = statistics.median(r["wall_s"] for r in runs["plain"])
        for name, rs in runs.items():
            wall = statistics.median(r["wall_s"] for r in rs)
            rows.append([f"{temperature:g}" if temperature else "greedy", name,
                         statistics.median(r["tokens_per_forward"] for r in rs),
                         statistics.median(r["steps"] for r in rs), wall, 1e3 * wall / args.new_tokens,
                         f"{plain_wall / wall:.2f}x"])
    print(table(["temperature", "setting", "tokens/forward", "target forwards", "wall s",
                 "ms/token", "speedup vs plain"], rows))

    if args.json:
        files.write_json(args.json, {"args": OmegaConf.to_container(args), "tree_forward_ms": tree_ms,
                                     "forward_ratio": ratio,
                                     "generation": {str(t): runs for t, runs in gen_results.items()}}, indent=1)


if __name__ == "__main__":
    main()
