"""Speculum's prompt lookup against transformers' own, side by side on the same target and prompts.

    python -m experiments.bench_hf_prompt_lookup                                   # 2 categories x 10 prompts, 64 tokens
    python -m experiments.bench_hf_prompt_lookup experiment.categories=[repetition_editing] experiment.per_category=20
    python -m experiments.bench_hf_prompt_lookup proposer.max_ngram=2 experiment.hf_max_ngram=2

Methods, greedy, each emitting exactly max_new_tokens tokens (EOS never stops a run):
    ours_plain   generate(target, None, ...)                   Speculum plain decoding
    ours_pld     generate(target, proposer, ...)               the configured proposer (prompt_lookup)
    hf_plain     model.generate(do_sample=False)               transformers' greedy search
    hf_pld       model.generate(prompt_lookup_num_tokens=K, max_matching_ngram_size=M)
    hf_pld_defaults   the same with transformers' defaults (K=10, M=2), when `hf_defaults` and they differ
HFTarget switches its model to the `speculum_tree` attention, so transformers runs a second instance
of cfg.target that keeps its own (sdpa or eager). A forward pre-hook on each model counts its
forward calls (prefill included): tokens per forward = new tokens / forwards, for every method;
ours also from its stats, (accepted + steps) / steps (the prefill's token left out).

Timing: one torch thread (experiment.num_threads), `experiment.warmup` untimed rounds of every method
on the first prompt, then per prompt the methods in round robin (the first one rotates from prompt to prompt),
each timed with time.perf_counter and summed per category. Ratios: ours_speedup = ours_plain /
ours_pld, hf_speedup = hf_plain / hf_pld, pld_ours_vs_hf = hf_pld / ours_pld, plain_ours_vs_hf =
hf_plain / ours_plain (> 1: ours is faster). Token check: a prompt counts as a mismatch when any
method's tokens differ from ours_plain's (reported, not asserted: attention kernels differ in float
rounding, so a near-tie can break differently). Writes <output_dir>/bench_hf_prompt_lookup.json.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from experiments.run import torch_threads, write_json
from framework.engine import GenerationOutput, generate
from framework.target import HFTarget
from framework.text import encode_prompt, tokenizer_of
from framework.zoo.corpus import build_corpus, stdlib_files
from framework.zoo.prompts import CATEGORIES, build_prompt_sets

HF_DEFAULTS = {"num_tokens": 10, "max_ngram": 2}  # PromptLookupCandidateGenerator's, max_matching_ngram_size None -> 2
HF_ATTENTION = ("sdpa", "eager")
SPLIT = ("draft_s", "target_s", "verify_s", "other_s")


class ForwardCounter:
    """Counts a module's forward calls (a pre-hook: every call of model(...), whatever calls it)."""

    def __init__(self, model: torch.nn.Module):
        self.calls = 0
        self.handle = model.register_forward_pre_hook(self._hook)

    def _hook(self, module, args) -> None:
        self.calls += 1


def _sync(model: torch.nn.Module) -> None:
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def hf_settings(cfg: DictConfig) -> dict[str, dict]:
    """The transformers prompt-lookup variants: name -> {num_tokens, max_ngram}. null settings take
    the proposer's num_tokens / max_ngram (transformers' defaults where the proposer has none)."""
    exp, proposer = cfg.experiment, cfg.proposer or {}
    given = {"num_tokens": exp.hf_num_tokens, "max_ngram": exp.hf_max_ngram}
    matched = {k: int(v if v is not None else proposer.get(k, HF_DEFAULTS[k])) for k, v in given.items()}
    variants = {"hf_pld": matched}
    if exp.hf_defaults and variants["hf_pld"] != HF_DEFAULTS:
        variants["hf_pld_defaults"] = dict(HF_DEFAULTS)
    return variants


def build_methods(cfg: DictConfig, tokens: int) -> tuple[dict[str, Callable], dict, HFTarget, torch.nn.Module]:
    """name -> run(prompt [1, L]) -> (new tokens, seconds, forward calls, GenerationOutput or None)."""
    ours_model, hf_model = instantiate(cfg.target), instantiate(cfg.target)  # two instances: see the docstring
    if hf_model is ours_model:
        raise ValueError("cfg.target must build a fresh model per instantiate (transformers needs its own copy)")
    target = HFTarget(ours_model)  # switches ours_model to the speculum_tree attention
    hf_attention = hf_model.config._attn_implementation
    if hf_attention not in HF_ATTENTION:
        raise ValueError(f"transformers' copy runs {hf_attention!r} attention, expected one of {HF_ATTENTION}")
    hf_model.generation_config.eos_token_id = None  # EOS never stops it (min_new_tokens needs an EOS id to act)
    ours_calls, hf_calls = ForwardCounter(ours_model), ForwardCounter(hf_model)
    make_proposer, sampling = instantiate(cfg.proposer), instantiate(cfg.sampling)
    if make_proposer is None:
        raise ValueError("this benchmark compares a proposer with transformers' prompt lookup: give one (proposer=prompt_lookup)")

    def ours(with_proposer: bool) -> Callable:
        def run(prompt: torch.Tensor):
            proposer = make_proposer() if with_proposer else None  # fresh proposer state per prompt
            before = ours_calls.calls
            _sync(ours_model)
            start = time.perf_counter()
            out: GenerationOutput = generate(target, proposer, prompt, tokens, sampling=sampling, seed=cfg.seed, eos_token_id=None)
            seconds = time.perf_counter() - start  # generate returns CPU tokens: device work is done
            return [t for t in out.tokens[0].tolist() if t >= 0], seconds, ours_calls.calls - before, out
        return run

    def hf(lookup: dict | None) -> Callable:
        extra = {} if lookup is None else {"prompt_lookup_num_tokens": lookup["num_tokens"],
                                           "max_matching_ngram_size": lookup["max_ngram"]}

        def run(prompt: torch.Tensor):
            before = hf_calls.calls
            ids = prompt.to(next(hf_model.parameters()).device)
            _sync(hf_model)
            start = time.perf_counter()
            out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens, min_new_tokens=tokens,
                                    do_sample=False, eos_token_id=None, pad_token_id=hf_model.generation_config.pad_token_id,
                                    **extra)
            new = out[0, ids.shape[1]:].tolist()  # .tolist() waits for the device
            return new, time.perf_counter() - start, hf_calls.calls - before, None
        return run

    variants = hf_settings(cfg)
    methods = {"ours_plain": ours(False), "ours_pld": ours(True), "hf_plain": hf(None),
               **{name: hf(setting) for name, setting in variants.items()}}
    settings = {"hf_attention": hf_attention, "ours_attention": ours_model.config._attn_implementation,
                "hf_variants": variants, "hf_generation_config": hf_model.generation_config.to_dict()}
    return methods, settings, target, ours_model


def first_difference(a: list[int], b: list[int]) -> int | None:
    """The first position where a and b differ (a length difference counts), or None."""
    diff = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), None)
    return diff if diff is not None or len(a) == len(b) else min(len(a), len(b))


def run(cfg: DictConfig) -> dict:
    with torch_threads(cfg.experiment.num_threads):
        return _run(cfg)


def _run(cfg: DictConfig) -> dict:
    exp = cfg.experiment
    unknown = set(exp.categories) - set(CATEGORIES)
    if unknown:
        raise ValueError(f"unknown categories {sorted(unknown)} (have {list(CATEGORIES)})")
    if not instantiate(cfg.sampling).greedy:
        raise ValueError("transformers runs greedy here (do_sample=False): use sampling=greedy")
    tokens = exp.max_new_tokens
    methods, settings, target, ours_model = build_methods(cfg, tokens)
    tokenizer = tokenizer_of(ours_model)
    if tokenizer is None:
        raise ValueError("the prompt sets are text: the target needs a tokenizer beside its checkpoint (e.g. target=zoo_target)")
    sets = build_prompt_sets(build_corpus(stdlib_files())["heldout"])
    names = list(methods)
    first = encode_prompt(sets[exp.categories[0]]["prompt"][0], tokenizer)
    for _ in range(exp.warmup):  # untimed
        for name in names:
            methods[name](first)

    rows, index = [], 0
    for category in exp.categories:
        seconds = dict.fromkeys(names, 0.0)
        forwards = dict.fromkeys(names, 0)
        emitted = dict.fromkeys(names, 0)
        steps = accepted = 0
        split = dict.fromkeys(SPLIT, 0.0)
        mismatches = []
        texts = sets[category]["prompt"][: exp.per_category]
        ids = sets[category]["id"][: exp.per_category]
        for text, prompt_id in zip(texts, ids):
            prompt = encode_prompt(text, tokenizer)  # [1, L]
            order = names[index % len(names):] + names[: index % len(names)]  # round robin, rotating start
            index += 1
            outputs = {}
            for name in order:
                new, t, calls, out = methods[name](prompt)
                outputs[name] = new
                seconds[name] += t
                forwards[name] += calls
                emitted[name] += len(new)
                if name == "ours_pld":
                    steps += out.stats.target_forwards
                    accepted += out.stats.accepted_total
                    summary = out.stats.summary()
                    split = {k: v + summary[k] for k, v in split.items()}
            reference = outputs["ours_plain"]
            differ = {name: first_difference(reference, new) for name, new in outputs.items() if new != reference}
            if differ or len(reference) != tokens:
                mismatches.append({"id": prompt_id, "prompt_tokens": prompt.shape[1],
                                   "lengths": {n: len(v) for n, v in outputs.items()}, "first_difference": differ})
        total_split = max(sum(split.values()), 1e-12)
        row = {
            "category": category, "prompts": len(texts), "max_new_tokens": tokens,
            "seconds": seconds, "forwards": forwards, "tokens": emitted,
            "tokens_per_forward": {n: emitted[n] / max(forwards[n], 1) for n in names},  # prefill counted
            "tokens_per_s": {n: emitted[n] / seconds[n] if seconds[n] else 0.0 for n in names},
            "ours_pld_tokens_per_forward_stats": (accepted + steps) / max(steps, 1),
            "ours_pld_split": {k.replace("_s", "_frac"): v / total_split for k, v in split.items()},
            "ours_pld_split_s": split,
            "ours_speedup": seconds["ours_plain"] / seconds["ours_pld"],
            "hf_speedup": seconds["hf_plain"] / seconds["hf_pld"],
            "pld_ours_vs_hf": seconds["hf_pld"] / seconds["ours_pld"],
            "plain_ours_vs_hf": seconds["hf_plain"] / seconds["ours_plain"],
            "mismatched_prompts": len(mismatches),
            "mismatches": mismatches,
        }
        if "hf_pld_defaults" in seconds:
            row["hf_defaults_speedup"] = seconds["hf_plain"] / seconds["hf_pld_defaults"]
            row["pld_ours_vs_hf_defaults"] = seconds["hf_pld_defaults"] / seconds["ours_pld"]
        rows.append(row)
    result = {"config": OmegaConf.to_container(cfg, resolve=True), "settings": settings, "methods": names, "rows": rows}
    result["path"] = str(write_json(cfg.output_dir, "bench_hf_prompt_lookup.json", result))
    return result


def table(result: dict) -> str:
    names, variants = result["methods"], result["settings"]["hf_variants"]
    label = {"hf_pld": "HF PLD (K={num_tokens}, M={max_ngram})".format(**variants["hf_pld"])}
    if "hf_pld_defaults" in variants:
        label["hf_pld_defaults"] = "HF PLD defaults (K={num_tokens}, M={max_ngram})".format(**variants["hf_pld_defaults"])
    lines = ["| category | prompts | method | time s | tokens/s | forwards | tokens/forward |", "|---|---:|---|---:|---:|---:|---:|"]
    for r in result["rows"]:
        for n in names:
            tpf = f"{r['tokens_per_forward'][n]:.2f}"
            if n == "ours_pld":
                tpf += f" (stats {r['ours_pld_tokens_per_forward_stats']:.2f})"
            lines.append(f"| {r['category']} | {r['prompts']} | {label.get(n, n)} | {r['seconds'][n]:.3f} | "
                         f"{r['tokens_per_s'][n]:.0f} | {r['forwards'][n]} | {tpf} |")
    lines += ["", "| category | ours PLD / ours plain | HF PLD / HF plain | ours PLD vs HF PLD | ours plain vs HF plain | "
              "ours PLD split draft / target / verify / other | token mismatches |", "|---|---:|---:|---:|---:|---|---:|"]
    for r in result["rows"]:
        s = r["ours_pld_split"]
        extra = f" (defaults {r['hf_defaults_speedup']:.2f}x)" if "hf_defaults_speedup" in r else ""
        vs = f" (defaults {r['pld_ours_vs_hf_defaults']:.2f}x)" if "pld_ours_vs_hf_defaults" in r else ""
        lines.append(f"| {r['category']} | {r['ours_speedup']:.2f}x | {r['hf_speedup']:.2f}x{extra} | {r['pld_ours_vs_hf']:.2f}x{vs} | "
                     f"{r['plain_ours_vs_hf']:.2f}x | {s['draft_frac']:.0%} / {s['target_frac']:.0%} / {s['verify_frac']:.0%} / "
                     f"{s['other_frac']:.0%} | {r['mismatched_prompts']}/{r['prompts']} |")
    lines.append(f"\nattention: ours {result['settings']['ours_attention']}, transformers {result['settings']['hf_attention']}; "
                 f"result: {result.get('path', '')}")
    return "\n".join(lines)


@hydra.main(config_path="../conf", config_name="bench_hf_prompt_lookup", version_base="1.3")
def main(cfg: DictConfig) -> None:
    print(table(run(cfg)))


if __name__ == "__main__":
    main()
