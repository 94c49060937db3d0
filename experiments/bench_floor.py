"""Benchmark: what a method costs when speculation is switched off, against plain decoding (the floor goodput
falls back to where drafting does not pay).

    python -m experiments.bench_floor                         # conf/bench_floor.yaml; ~5 min at one thread
    python -m experiments.bench_floor 'methods=[eagle3]' 'modes=[idle]' rounds=10

For each (method, mode): the generations of each round timed against plain decoding of the same prompts in the same
round (one thread, both sides), the ratio per round and its median over the rounds (a shared machine drifts by
more than the floor within minutes: only ratios taken side by side mean anything), and where a step's time goes
beside plain's (ms per step: drafting, target, verification, the rest of the step, and outside the steps: the start
and the policy's books). `idle` plans every step plain, so only the proposer's books are paid; `goodput` is the
default policy, one object per method across the rounds as a comparison keeps one per cell, so its probes and its
learning are in the figure.
"""

from __future__ import annotations

import statistics
import time

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from engine.loop import DecodeOptions, generate
from framework.core import files
from framework.core.policy import AtDepth
from framework.lm.target import HFTarget
from measurement.common import option, text_ids, torch_threads

PARTS = ("draft_s", "target_s", "verify_s", "other_s")


def timed(target, make, prompts, cfg: DictConfig, sampling, policy, seed: int) -> dict:
    """The generations of one round: seconds, steps and the steps' parts (seconds)."""
    out = {"seconds": 0.0, "steps": 0, **{k: 0.0 for k in PARTS}}
    for prompt in prompts:
        start = time.perf_counter()
        run = generate(target, make() if make else None, prompt, cfg.max_new_tokens, sampling, seed=seed,
                       options=DecodeOptions(policy=policy))
        out["seconds"] += time.perf_counter() - start
        out["steps"] += len(run.stats.steps)
        for step in run.stats.steps:
            for k in PARTS:
                out[k] += getattr(step, k)
    return out


def measure(cfg: DictConfig) -> dict:
    target = HFTarget(instantiate(cfg.target))
    sampling = instantiate(option("sampling", cfg.sampling_name, cfg, "sampling_name"))
    text = text_ids(target.model, 2 * sum(cfg.prompt_tokens))  # held-out text (random ids without a tokenizer)
    prompts, at = [], 0
    for length in cfg.prompt_tokens:
        prompts.append(torch.tensor([text[at: at + length]]))
        at += 2 * length
    makes = {m: instantiate(option("proposer", m, cfg, "methods")) for m in cfg.methods}
    modes = {"idle": lambda: AtDepth(0), "goodput": lambda: instantiate(option("policy", "goodput", cfg, "modes"))()}
    unknown = [m for m in cfg.modes if m not in modes]
    if unknown:
        raise ValueError(f"unknown modes {unknown} (have {sorted(modes)})")
    cells = {(m, mode): modes[mode]() for m in cfg.methods for mode in cfg.modes}  # one policy per cell, kept
    timed(target, None, prompts, cfg, sampling, None, 0)  # untimed: first calls build caches
    for (m, _), policy in cells.items():
        timed(target, makes[m], prompts, cfg, sampling, policy, 0)
    plain, runs = [], {cell: [] for cell in cells}
    for round_ in range(cfg.rounds):
        plain.append(timed(target, None, prompts, cfg, sampling, None, round_ + 1))
        for (m, mode), policy in cells.items():
            runs[m, mode].append(timed(target, makes[m], prompts, cfg, sampling, policy, round_ + 1))
    rows = [row("plain", "-", plain, plain)] + [row(m, mode, r, plain) for (m, mode), r in runs.items()]
    return {"rows": rows, "rounds": cfg.rounds, "sampling": cfg.sampling_name, "threads": torch.get_num_threads()}


def row(method: str, mode: str, runs: list[dict], plain: list[dict]) -> dict:
    ratios = sorted(p["seconds"] / r["seconds"] for p, r in zip(plain, runs))
    per_step = lambda k: 1e3 * statistics.median(r[k] / r["steps"] for r in runs)  # noqa: E731
    outside = 1e3 * statistics.median((r["seconds"] - sum(r[k] for k in PARTS)) / r["steps"] for r in runs)
    return {"method": method, "mode": mode, "speedup": statistics.median(ratios), "lowest": ratios[0],
            "highest": ratios[-1], "steps": runs[0]["steps"], **{f"{k[:-2]}_ms": per_step(k) for k in PARTS},
            "outside_ms": outside}


def table(result: dict) -> str:
    lines = [f"speculation switched off against plain decoding ({result['sampling']}, {result['threads']} thread(s), "
             f"median of {result['rounds']} rounds, each against its own plain run)",
             "| method | mode | speedup [lowest..highest] | steps | "
             "ms per step: draft / target / verify / other / outside |",
             "|---|---|---:|---:|---|"]
    for r in result["rows"]:
        lines.append(f"| {r['method']} | {r['mode']} | {r['speedup']:.3f}x [{r['lowest']:.3f}..{r['highest']:.3f}] | "
                     f"{r['steps']} | {r['draft_ms']:.2f} / {r['target_ms']:.2f} / {r['verify_ms']:.2f} / "
                     f"{r['other_ms']:.2f} / {r['outside_ms']:.2f} |")
    return "\n".join(lines)


@hydra.main(config_path="../conf", config_name="bench_floor", version_base="1.3")
def main(cfg: DictConfig) -> None:
    with torch_threads(cfg.threads), torch.no_grad():
        result = measure(cfg)
    print(table(result))
    if cfg.json:
        files.write_json(cfg.json, result)


if __name__ == "__main__":
    main()
