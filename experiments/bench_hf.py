"""Side by side with transformers: its generate beside Speculum's, same target, same prompts, same run.

    python -m experiments.bench_hf                                    # 10 code prompts x 128 tokens, greedy + T = 1
    python -m experiments.bench_hf experiment.methods=[hf_plain,hf_pld,ours_plain,ours_prompt_lookup]
    python -m experiments.bench_hf experiment.categories=[repetition_editing] experiment.max_new_tokens=64

Methods (experiment.methods; conf/experiment/bench_hf.yaml says what each runs): hf_plain,
hf_assisted (assistant_model = the draft of proposer config `experiment.assistant`, transformers'
default schedule), hf_pld (transformers' prompt lookup at its defaults), hf_pld_matched (at our
prompt lookup's num_tokens / max_ngram), ours_plain, and ours_<name> for conf/proposer/<name>.yaml.
Every method emits exactly max_new_tokens tokens (EOS never stops a run).

transformers runs its own instances of the target and the assistant (HFTarget and our draft switch
theirs to the `speculum_tree` attention; transformers' keep sdpa or eager). A forward pre-hook on
each target counts its forward calls: tokens per forward = new tokens / forwards (our prefill
counts as one; transformers' assisted generation has no separate prefill, its first forward
verifies candidates too). Ours also from stats: (accepted + steps) / steps.

Timing: one torch thread, `experiment.warmup` untimed rounds on the first prompt, then per prompt
and sampling every method in round robin (the first one rotating), each timed with perf_counter
and summed. speedup = hf_plain seconds / the method's (same sampling). At greedy a prompt counts as
a mismatch when a method's tokens differ from hf_plain's (reported, not asserted: attention
kernels round differently, so a near-tie can break either way). At T > 0 transformers gets
do_sample=True, the temperature, and top_k=0 (None would mean its default top_k=50, another law);
texts are not expected to agree there. Writes <output_dir>/bench_hf.json.
"""

from __future__ import annotations

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from experiments.common import option, torch_threads, write_json
from experiments.methods import HF_METHODS, HF_PLD_DEFAULTS, build_methods, full_length_only, hf_sampling
from framework.lm.text import encode_prompt, tokenizer_of
from framework.zoo.prompts import CATEGORIES, stdlib_prompt_sets


def plan(cfg: DictConfig) -> tuple[list[str], dict[str, DictConfig], dict]:
    """The methods to run, ours_<name> -> its proposer node, and transformers' PLD variants (checked
    before anything is timed, so a wrong name fails at once)."""
    methods = list(cfg.experiment.methods)
    if "hf_plain" not in methods:
        raise ValueError("experiment.methods needs hf_plain: speedups and text identity are measured against it")
    wrong = [m for m in methods if not (m in HF_METHODS or m.startswith("ours_"))]
    if wrong:
        raise ValueError(f"unknown methods {wrong} in experiment.methods (have {list(HF_METHODS)}, ours_plain, ours_<proposer config>)")
    proposers = {m: option("proposer", m.removeprefix("ours_"), cfg, f"experiment.methods: {m}") for m in methods if m.startswith("ours_") and m != "ours_plain"}
    matched = option("proposer", cfg.experiment.pld_matched, cfg, "experiment.pld_matched")
    variants = {"hf_pld": dict(HF_PLD_DEFAULTS),
                "hf_pld_matched": {"num_tokens": int(matched.num_tokens), "max_ngram": int(matched.max_ngram)}}
    if variants["hf_pld_matched"] == variants["hf_pld"] and "hf_pld_matched" in methods:
        methods.remove("hf_pld_matched")  # the same run twice
    return methods, proposers, variants


def workload(cfg: DictConfig, tokenizer) -> list[tuple[str, torch.Tensor]]:
    """(prompt id, [1, L]) pairs: experiment.prompts as token ids, else the first per_category of each set."""
    exp = cfg.experiment
    if exp.prompts is not None:
        return [(f"prompt{i}", encode_prompt(list(p), tokenizer)) for i, p in enumerate(exp.prompts)]
    unknown = set(exp.categories) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"unknown categories {sorted(unknown)} (have {list(CATEGORIES)})")
    if tokenizer is None:
        raise ValueError("the prompt sets are text: the target needs a tokenizer (e.g. models=zoo), or give experiment.prompts")
    sets = stdlib_prompt_sets()
    return [(i, encode_prompt(text, tokenizer)) for c in exp.categories
            for text, i in zip(sets[c]["prompt"][: exp.per_category], sets[c]["id"][: exp.per_category])]


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where a and b differ (a length difference counts), or None."""
    diff = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return diff if diff is not None or len(a) == len(b) else min(len(a), len(b))


def run(cfg: DictConfig) -> dict:
    with torch_threads(cfg.experiment.num_threads):
        return _run(cfg)


def _run(cfg: DictConfig) -> dict:
    exp = cfg.experiment
    full_length_only(cfg)
    samplings = {name: instantiate(option("sampling", name, cfg, "experiment.samplings")) for name in exp.samplings}
    for law in samplings.values():
        hf_sampling(law)  # refuses an unmappable law before anything runs
    methods, proposers, variants = plan(cfg)
    runners, settings, ours_model = build_methods(cfg, methods, proposers, variants)
    prompts = workload(cfg, tokenizer_of(ours_model))
    for _ in range(exp.warmup):  # untimed
        for law in samplings.values():
            for name in methods:
                runners[name](prompts[0][1], law)

    cells = {(m, s): {"seconds": 0.0, "forwards": 0, "tokens": 0, "steps": 0, "accepted": 0, "first_difference": {},
                            "per_prompt": {}}
             for s in samplings for m in methods}
    turn = 0
    for prompt_id, prompt in prompts:
        for s, law in samplings.items():
            order = methods[turn % len(methods):] + methods[: turn % len(methods)]  # round robin, rotating start
            turn += 1
            outputs = {}
            for name in order:
                new, seconds, calls, stats = runners[name](prompt, law)
                outputs[name], cell = new, cells[name, s]
                cell["seconds"] += seconds
                cell["forwards"] += calls
                cell["tokens"] += len(new)
                cell["per_prompt"][prompt_id] = {"seconds": seconds, "forwards": calls}  # per-category sums from the JSON
                if stats is not None:
                    cell["steps"] += stats.target_forwards
                    cell["accepted"] += stats.accepted_total
            if law.greedy:
                for name, new in outputs.items():
                    diff = first_difference(outputs["hf_plain"], new)
                    if diff is not None:
                        cells[name, s]["first_difference"][prompt_id] = diff

    rows = []
    for (m, s), c in cells.items():
        base = cells["hf_plain", s]["seconds"]
        rows.append({"method": m, "sampling": s, "prompts": len(prompts), "seconds": c["seconds"],
                     "speedup": base / c["seconds"] if c["seconds"] else 0.0,
                     "forwards": c["forwards"], "tokens": c["tokens"],
                     "tokens_per_forward": c["tokens"] / max(c["forwards"], 1),
                     "tokens_per_forward_stats": (c["accepted"] + c["steps"]) / c["steps"] if c["steps"] else None,
                     "mismatches": len(c["first_difference"]) if samplings[s].greedy else None,
                     "first_difference": c["first_difference"], "per_prompt": c["per_prompt"]})
    settings.update(prompts=[p for p, _ in prompts], max_new_tokens=exp.max_new_tokens, threads=torch.get_num_threads())
    result = {"config": OmegaConf.to_container(cfg, resolve=True), "settings": settings, "methods": methods,
              "samplings": list(samplings), "rows": rows}
    result["path"] = str(write_json(cfg.output_dir, "bench_hf.json", result))
    return result


def table(result: dict) -> str:
    lines = ["| method | sampling | time s | speedup vs hf_plain | tokens/forward | greedy: prompts differing from hf_plain |",
             "|---|---|---:|---:|---:|---:|"]
    for r in result["rows"]:
        tpf = f"{r['tokens_per_forward']:.2f}"
        if r["tokens_per_forward_stats"] is not None:
            tpf += f" (stats {r['tokens_per_forward_stats']:.2f})"
        differ = "-" if r["mismatches"] is None else f"{r['mismatches']}/{r['prompts']}"
        lines.append(f"| {r['method']} | {r['sampling']} | {r['seconds']:.2f} | {r['speedup']:.2f}x | {tpf} | {differ} |")
    s = result["settings"]
    pld = ", ".join(f"{n} K={v['num_tokens']} M={v['max_ngram']}" for n, v in s["hf_pld"].items())
    lines.append(f"\nattention: ours {s['ours_attention']}, transformers {s['hf_attention']}; {pld}; "
                 f"assistant: {s.get('assistant', '-')}; result: {result.get('path', '')}")
    return "\n".join(lines)


@hydra.main(config_path="../conf", config_name="bench_hf", version_base="1.3")
def main(cfg: DictConfig) -> None:
    print(table(run(cfg)))


if __name__ == "__main__":
    main()
