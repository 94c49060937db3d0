"""Benchmark: the target's forward through torch.compile against eager, same run, interleaved.

    python -m experiments.bench_compile                 # zoo target, plain decoding and a draft chain, 64 tokens
    python -m experiments.bench_compile new_tokens=128 rounds=5 json=compile.json

Both targets hold their own copy of the same weights. Compile time: the first (warm-up)
generation of the compiled target minus the eager one's. Then rounds interleaved rounds of each
setting; the figure is the median seconds per generation and eager / compiled (> 1: compile wins).
The texts must agree (greedy), else the run says so.
"""

from __future__ import annotations

import statistics
import time

import hydra
import torch
from omegaconf import DictConfig

from engine.loop import DecodeOptions, generate
from framework.control.adaptive import AdaptiveDepth
from framework.core import files
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from framework.zoo.checkpoints import load_causal_lm
from measurement.common import heldout_prompt
from proposers.draft_model import DraftModelProposer


@hydra.main(config_path="../conf", config_name="bench_compile", version_base="1.3")
def main(args: DictConfig) -> None:
    torch.set_num_threads(args.threads)
    draft = load_causal_lm(args.draft)
    targets = {"eager": HFTarget(load_causal_lm(args.target)),
               "compiled": HFTarget(load_causal_lm(args.target), compile=True)}
    prompt = heldout_prompt(targets["eager"].model, args.prompt)
    # setting -> (a fresh proposer, a fresh policy): the draft chain as it ran before its schedule became a policy
    settings = {"plain": lambda: (None, None),
                "draft": lambda: (DraftModelProposer(draft, depth=8, stop_below=0.3), AdaptiveDepth(8, first_depth=4))}
    greedy = SamplingConfig(temperature=0.0)

    def run(name: str, setting: str):
        start = time.perf_counter()
        proposer, policy = settings[setting]()
        out = generate(targets[name], proposer, prompt, args.new_tokens, greedy, options=DecodeOptions(policy=policy))
        return time.perf_counter() - start, out.tokens

    first = {name: run(name, "plain")[0] for name in targets}
    results = {"compile_s": first["compiled"] - first["eager"], "failure": targets["compiled"].lm.call.failure}
    for setting in settings:
        times = {name: [] for name in targets}
        tokens = {}
        for _ in range(args.rounds):
            for name in targets:
                seconds, tokens[name] = run(name, setting)
                times[name].append(seconds)
        eager, compiled = (statistics.median(times[n]) for n in ("eager", "compiled"))
        results[setting] = {"eager_s": eager, "compiled_s": compiled, "eager_over_compiled": eager / compiled,
                            "same_tokens": bool(torch.equal(tokens["eager"], tokens["compiled"]))}
    print(f"compile time {results['compile_s']:.1f} s"
          + (f" (fell back: {results['failure']})" if results["failure"] else ""))
    print("| setting | eager s | compiled s | eager / compiled | same tokens |\n|---|---:|---:|---:|---|")
    for setting in settings:
        r = results[setting]
        print(f"| {setting} | {r['eager_s']:.2f} | {r['compiled_s']:.2f} | {r['eager_over_compiled']:.2f}x | "
              f"{r['same_tokens']} |")
    if args.json:
        files.write_json(args.json, results)


if __name__ == "__main__":
    main()
