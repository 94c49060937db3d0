"""One method per prompt category (Spec-Bench style), against plain decoding of the same target.

    python -m experiments.categories                                  # zoo draft, temperature 1
    python -m experiments.categories -m proposer=draft,draft_tree sampling=greedy
    python -m experiments.categories experiment.per_category=40 experiment.max_new_tokens=128

Prompts come from framework.zoo.prompts (code continuation, function body, repetition-heavy
editing, long-context retrieval), cut from the held-out stdlib files and encoded with the
tokenizer saved beside the target's checkpoint. For every prompt the speculative and the plain
run alternate; per category: tokens per target forward, mean accepted drafts, the speedup
= total plain wall time / total speculative wall time, the time split of the speculative loop
(draft, target forward, verify, other) and the cost of one speculative step in plain steps: the
speedup is bounded by tokens per forward / that cost. Writes <output_dir>/categories.json (the
rows) and <output_dir>/result.json (the overall figures, one per multirun job, as experiments.run).
`main` returns the overall speedup (total plain s / total speculative s over every prompt), the
objective of the Optuna sweeper `hydra/sweeper=tune_draft`.
"""

from __future__ import annotations

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from experiments.common import job_record, timed_generate, write_json
from framework.lm.target import HFTarget
from framework.lm.text import encode_prompt, tokenizer_of
from framework.zoo.prompts import CATEGORIES, stdlib_prompt_sets


def run(cfg: DictConfig) -> list[dict]:
    exp = cfg.experiment
    unknown = set(exp.categories) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"unknown categories {sorted(unknown)} (have {list(CATEGORIES)})")
    if not exp.categories or exp.per_category < 1:
        raise ValueError(f"no prompts to time: experiment.categories={list(exp.categories)}, "
                         f"experiment.per_category={exp.per_category}")
    if exp.num_threads is not None:
        torch.set_num_threads(exp.num_threads)
    model = instantiate(cfg.target)
    tokenizer = tokenizer_of(model)
    if tokenizer is None:
        raise ValueError("the prompt sets are text: the target needs a tokenizer beside its checkpoint (e.g. models=zoo)")
    target, make_proposer, sampling = HFTarget(model), instantiate(cfg.proposer), instantiate(cfg.sampling)
    sets = stdlib_prompt_sets()
    tokens = exp.max_new_tokens
    timed_generate(target, None, encode_prompt("import os\n", tokenizer), cfg, sampling, tokens)  # warm-up, untimed
    rows = []
    for category in exp.categories:
        forwards = accepted = plain_forwards = 0
        spec_s = plain_s = 0.0
        split = dict.fromkeys(("draft_s", "target_s", "verify_s", "other_s"), 0.0)
        for text in sets[category]["prompt"][: exp.per_category]:
            prompt = encode_prompt(text, tokenizer)  # [1, L]
            spec, t_spec = timed_generate(target, make_proposer() if make_proposer else None, prompt, cfg, sampling, tokens)
            plain, t_plain = timed_generate(target, None, prompt, cfg, sampling, tokens)
            accepted += spec.stats.accepted_total
            forwards += spec.stats.target_forwards
            plain_forwards += plain.stats.target_forwards + 1  # the prefill's logits give the first token
            summary = spec.stats.summary()
            split = {k: v + summary[k] for k, v in split.items()}
            spec_s, plain_s = spec_s + t_spec, plain_s + t_plain
        rows.append({"category": category, "prompts": min(exp.per_category, len(sets[category])),
                     "tokens_per_forward": (accepted + forwards) / max(forwards, 1), "mean_accepted": accepted / max(forwards, 1),
                     "speculative_s": spec_s, "plain_s": plain_s, "speedup": plain_s / spec_s if spec_s else 0.0,
                     "step_cost": (spec_s / max(forwards, 1)) / (plain_s / max(plain_forwards, 1)),
                     **{k.replace("_s", "_frac"): v / max(sum(split.values()), 1e-12) for k, v in split.items()}})
    write_json(cfg.output_dir, "categories.json", rows)
    write_json(cfg.output_dir, "result.json", {
        **job_record(),
        "config": OmegaConf.to_container(cfg, resolve=True), **overall(rows),
        "speedup_by_category": {r["category"]: r["speedup"] for r in rows},
        "tokens_per_forward_by_category": {r["category"]: r["tokens_per_forward"] for r in rows}})
    return rows


def overall(rows: list[dict]) -> dict:
    """Every prompt at once: speedup = total plain s / total speculative s, so a category's weight is
    its time, not 1 / len(rows) as a mean of the categories' speedups would give it."""
    spec_s, plain_s = sum(r["speculative_s"] for r in rows), sum(r["plain_s"] for r in rows)
    return {"prompts": sum(r["prompts"] for r in rows), "speculative_s": spec_s, "plain_s": plain_s,
            "speedup": plain_s / spec_s}


def table(rows: list[dict]) -> str:
    lines = ["| category | prompts | tokens/forward | mean accepted | step cost (plain steps) | bound | speedup | "
             "split draft / target / verify / other |", "|---|---:|---:|---:|---:|---:|---:|---|"]
    lines += [f"| {r['category']} | {r['prompts']} | {r['tokens_per_forward']:.2f} | {r['mean_accepted']:.2f} | "
              f"{r['step_cost']:.2f} | {r['tokens_per_forward'] / r['step_cost']:.2f}x | {r['speedup']:.2f}x | "
              f"{r['draft_frac']:.0%} / {r['target_frac']:.0%} / {r['verify_frac']:.0%} / {r['other_frac']:.0%} |"
              for r in rows]
    return "\n".join(lines)


@hydra.main(config_path="../conf", config_name="categories", version_base="1.3")
def main(cfg: DictConfig) -> float:
    rows = run(cfg)
    total = overall(rows)
    print(table(rows))
    print(f"all {total['prompts']} prompts: speedup {total['speedup']:.3f}x "
          f"(plain {total['plain_s']:.2f} s / speculative {total['speculative_s']:.2f} s)")
    return total["speedup"]  # the Optuna sweeper's objective (hydra/sweeper=tune_draft)


if __name__ == "__main__":
    main()
