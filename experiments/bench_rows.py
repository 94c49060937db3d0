"""Benchmark: a proposer's own cost per decoding step against the batch size.

    python -m experiments.bench_rows                                   # the methods and batches of conf/bench_rows.yaml
    python -m experiments.bench_rows 'methods=[mix]' 'batches=[1,500]'

B rows decode side by side on the run's target (the zoo's) at its sampling (T = 1): each row its own window of
the held-out corpus, so the rows' candidates differ and a shape shared by the rows is a real union. After
`warmup` steps, `steps` steps are timed. Per step (median):

- proposer: the proposer's own calls (propose, side rows, observe, commit);
- in models: the part of it inside model forwards (outermost nn.Module calls: heads, the target's lm_head);
- bookkeeping: the rest, its per-row Python and tensor work (tries, histories, searches, the merge);
- step: the whole decoding step (the target's forward and the verifier included).

Ratios are to the same method's batch-1 figure in the same run. The target's forward and the heads grow with
the batch as real work does; the bookkeeping should not grow faster than the rows' own work.
"""

from __future__ import annotations

import json
import statistics
import time
from contextlib import contextmanager

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from engine.loop import Decoder
from framework.core.host_memory import keep_large_tensors_on_heap
from framework.core.proposer import SideRowProposer
from framework.core.randomness import TorchSource
from framework.lm.target import HFTarget
from framework.lm.text import tokenizer_of
from framework.zoo.corpus import build_corpus, stdlib_files
from measurement.common import option, torch_threads, write_json


class ModuleClock:
    """Seconds spent in outermost nn.Module calls while `counting` (global forward hooks)."""

    def __init__(self):
        self.seconds, self.depth, self.started, self.counting = 0.0, 0, 0.0, False

    def before(self, module, args) -> None:
        if self.counting and self.depth == 0:
            self.started = time.perf_counter()
        self.depth += 1

    def after(self, module, args, output) -> None:
        self.depth -= 1
        if self.counting and self.depth == 0:
            self.seconds += time.perf_counter() - self.started

    @contextmanager
    def installed(self):
        handles = [torch.nn.modules.module.register_module_forward_pre_hook(self.before),
                   torch.nn.modules.module.register_module_forward_hook(self.after)]
        try:
            yield self
        finally:
            for handle in handles:
                handle.remove()


class TimedProposer:
    """A proposer whose calls are timed (seconds in all, and in model forwards)."""

    def __init__(self, inner, clock: ModuleClock):
        self.inner, self.clock, self.seconds = inner, clock, 0.0
        self.hidden_layers, self.couples_rows = inner.hidden_layers, getattr(inner, "couples_rows", False)

    def timed(self, method: str, *args):
        self.clock.counting, start = True, time.perf_counter()
        try:
            return getattr(self.inner, method)(*args)
        finally:
            self.seconds += time.perf_counter() - start
            self.clock.counting = False

    def prefill(self, input_ids, target):
        self.inner.prefill(input_ids, target)
        self.hidden_layers = self.inner.hidden_layers

    def propose(self, state):
        return self.timed("propose", state)

    def commit(self, result):
        return self.timed("commit", result)

    def select(self, rows):
        return self.timed("select", rows)


class TimedSideRows(TimedProposer):
    def side_rows(self, tree):
        return self.timed("side_rows", tree)

    def observe_side(self, logits):
        return self.timed("observe_side", logits)


def corpus_windows(model, rows: int, length: int) -> torch.Tensor:
    """[rows, length]: windows of the held-out corpus in the model's tokenizer, spread over it (overlapping
    only when the corpus is short)."""
    text = "\n".join(build_corpus(stdlib_files())["heldout"]["text"])
    ids = torch.tensor(tokenizer_of(model)(text, add_special_tokens=False)["input_ids"], dtype=torch.long)
    starts = torch.linspace(0, ids.numel() - length, rows).long()
    return ids[starts[:, None] + torch.arange(length)]


def measure(target_model, factory, sampling, prompt: torch.Tensor, warmup: int, steps: int, seed: int) -> dict:
    clock = ModuleClock()
    inner = factory()
    proposer = (TimedSideRows if isinstance(inner, SideRowProposer) else TimedProposer)(inner, clock)
    decoder = Decoder(HFTarget(target_model), proposer, sampling, TorchSource(seed=seed))
    decoder.prefill(prompt)
    rows = {"proposer": [], "in_models": [], "step": []}
    with clock.installed():
        for step in range(warmup + steps):
            proposer.seconds, clock.seconds = 0.0, 0.0
            start = time.perf_counter()
            decoder.step()
            if step >= warmup:
                rows["step"].append(time.perf_counter() - start)
                rows["proposer"].append(proposer.seconds)
                rows["in_models"].append(clock.seconds)
    ms = {k: 1e3 * statistics.median(v) for k, v in rows.items()}
    ms["bookkeeping"] = ms["proposer"] - ms["in_models"]
    return {**{f"{k}_ms": round(v, 2) for k, v in ms.items()},
            "nodes": statistics.median(s.nodes for s in decoder.stats.steps[warmup:])}


def table(results: list[dict]) -> str:
    lines = ["| method | batch | nodes | proposer ms | in models ms | bookkeeping ms | step ms | proposer / B=1 | "
             "bookkeeping / B=1 proposer |",
             "|---|---|---|---|---|---|---|---|---|"]
    first = {r["method"]: r for r in results if r["batch"] == 1}
    for r in results:
        one = first.get(r["method"])
        ratio = lambda key: f"{r[key] / one['proposer_ms']:.1f}x" if one else "-"  # noqa: E731
        lines.append(f"| {r['method']} | {r['batch']} | {r['nodes']} | {r['proposer_ms']:.1f} | "
                     f"{r['in_models_ms']:.1f} | {r['bookkeeping_ms']:.1f} | {r['step_ms']:.0f} | "
                     f"{ratio('proposer_ms')} | {ratio('bookkeeping_ms')} |")
    return "\n".join(lines)


def run(cfg: DictConfig) -> list[dict]:
    if cfg.large_tensors_on_heap:
        keep_large_tensors_on_heap()
    with torch_threads(cfg.threads):
        model, sampling = instantiate(cfg.target), instantiate(cfg.sampling)
        factories = {m: instantiate(option("proposer", m, cfg, "methods")) for m in cfg.methods}
        prompts = corpus_windows(model, max(cfg.batches), cfg.prompt_tokens)
        results = []
        for batch in cfg.batches:
            for method, factory in factories.items():
                # the batch's rows spread over the corpus like the largest batch's
                rows = prompts[torch.linspace(0, prompts.shape[0] - 1, batch).long()]
                result = {"method": method, "batch": batch,
                          **measure(model, factory, sampling, rows, cfg.warmup, cfg.steps, cfg.seed)}
                print(json.dumps(result), flush=True)
                results.append(result)
    return results


@hydra.main(config_path="../conf", config_name="bench_rows", version_base="1.3")
def main(cfg: DictConfig) -> None:
    results = run(cfg)
    print(table(sorted(results, key=lambda r: (cfg.methods.index(r["method"]), r["batch"]))))
    if cfg.json:
        write_json(".", cfg.json, results)
    print(f"written to {write_json(cfg.output_dir, 'bench_rows.json', results)}")


if __name__ == "__main__":
    main()
