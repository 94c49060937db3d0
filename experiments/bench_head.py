"""What one draft step costs on this machine, in units of one target forward (one thread).

    python -m experiments.bench_head                       # the zoo target, draft and EAGLE heads
    python -m experiments.bench_head heads=[eagle,eagle3] repeats=50

After one prefill of a `prompt`-token random prompt, calls are timed interleaved (each case once
per round, so a noisy machine slows them alike; median of the rounds):
- target: forward_tree with 1 node (a plain decoding step) and with 32 nodes;
- draft model: one forward of 1 and 8 tokens through Hugging Face's model call (CachedLM);
- EAGLE head: one read of 1 and 8 nodes (the lean path: the single decoder layer called directly,
  the mask built once per read) and its lm_head; a step of depth d costs d such calls.
"""

from __future__ import annotations

import statistics
import time

import hydra
import torch
from omegaconf import DictConfig

from framework.core.proposer import DecodeState
from framework.core.randomness import TorchSource
from framework.core.sampling import SamplingConfig
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape
from framework.lm.cached_lm import CachedLM
from framework.lm.target import HFTarget
from framework.zoo.checkpoints import load_causal_lm
from proposers.eagle.proposer import EagleProposer, HeadReader
from proposers.heads import load_head


def interleaved(cases: dict, repeats: int) -> dict[str, float]:
    """ms per call (median of `repeats` rounds after two warm-up rounds); cases: name -> (call, reset)."""
    times = {name: [] for name in cases}
    for rep in range(repeats + 2):
        for name, (call, reset) in cases.items():
            start = time.perf_counter()
            call()
            elapsed = time.perf_counter() - start
            reset()
            if rep >= 2:
                times[name].append(elapsed)
    return {name: 1e3 * statistics.median(t) for name, t in times.items()}


@hydra.main(config_path="../conf", config_name="bench_head", version_base="1.3")
def main(args: DictConfig) -> None:
    torch.set_num_threads(1)
    model, draft = load_causal_lm("target"), load_causal_lm("draft")
    prompt = torch.randint(model.config.vocab_size, (1, args.prompt), generator=torch.Generator().manual_seed(0))
    target = HFTarget(model)
    target.provide_hidden((-1,))
    target.prefill(prompt)
    tree = {n: CandidateTree.from_parents(prompt[:, :n], TreeShape.full(2, 6).parents[:n]) for n in (1, 32)}
    cases = {f"target forward_tree, {n} node(s)": (lambda n=n: target.forward_tree(prompt[:, -1], tree[n]),
                                                    target.lm.drop_pending)
             for n in tree}
    lm = CachedLM(draft, tree_backend="auto")
    lm.reset(1)
    lm.forward(prompt, torch.arange(args.prompt), torch.ones(args.prompt, args.prompt, dtype=torch.bool).tril())
    lm.keep(torch.arange(args.prompt)[None], torch.tensor([args.prompt]))
    for m in (1, 8):
        cases[f"draft model forward, {m} token(s)"] = (
            lambda m=m: lm.forward(prompt[:, :m], torch.zeros(m, dtype=torch.long), torch.eye(m, dtype=torch.bool)),
            lm.drop_pending)
    for name in args.heads:
        head = load_head(name)
        hf = HFTarget(model)
        proposer = EagleProposer(head, None, top_k=8, depth=5, budget=32)
        proposer.prefill(prompt, hf)  # first, as the engine does: it settles the layers the head reads
        hf.provide_hidden(proposer.hidden_layers)
        out = hf.prefill(prompt)
        state = DecodeState(prompt[0, -1:], torch.zeros(1, model.config.vocab_size, dtype=torch.bool),
                            SamplingConfig(temperature=0.0), TorchSource(0), None, out.hidden,
                            torch.tensor([args.prompt]))
        root = proposer.catch_up(state)  # the prompt is in the head's cache from here on
        for m in (1, 8):
            cases[f"{name} head read, {m} node(s)"] = (
                lambda m=m, p=proposer, r=root: HeadReader(p, r).read(list(range(m)), [-1] * m, prompt[:, :m], [1] * m),
                proposer.cache.drop_pending)

    ms = interleaved(cases, args.repeats)
    unit = ms["target forward_tree, 1 node(s)"]
    print(f"one thread, prompt {args.prompt} tokens, median of {args.repeats} interleaved rounds\n")
    print("| call | ms | target forwards |\n|---|---:|---:|")
    for name, value in ms.items():
        print(f"| {name} | {value:.2f} | {value / unit:.2f} |")


if __name__ == "__main__":
    main()
