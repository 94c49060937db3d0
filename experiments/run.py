"""One method against plain decoding of the same target, in the same run (docs/design.md section 9).

    python -m experiments.run                                    # zoo target + zoo draft, greedy, then one sampled line
    python -m experiments.run proposer=draft_tree sampling=t07 'prompt="def parse(text):"'
    python -m experiments.run -m proposer=none,draft,draft_tree sampling=greedy,t1
    python -m experiments.run target.path=/my/hf/checkpoint models.draft.path=/my/hf/draft
    python -m experiments.run models=tiny proposer=draft   # random weights, ids

Hydra builds every object (target model, proposer factory, sampling law) from conf/; this file
never branches on a method's name. Timing: `experiment.warmup` untimed rounds, then
`experiment.repeats` rounds of speculative and plain decoding, interleaved; the reported wall
time of each is the median over the rounds. Speedup = plain median / speculative median.
Writes <output_dir>/result.json (one per multirun job).
"""

from __future__ import annotations

import statistics

import hydra
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from framework.lm.sharding import placement_of, writes_results
from framework.lm.target import HFTarget
from framework.lm.text import decode, encode_prompt, tokenizer_of
from measurement.common import (
    emitted,
    job_record,
    option,
    owned_output,
    policy_factory_of,
    timed_generate,
    torch_threads,
    verifier_of,
    whole_number,
    write_json,
)


def check_settings(cfg: DictConfig) -> None:
    """Before any model is built: a timed run needs tokens to time and rounds to take the median of."""
    whole_number("max_new_tokens", cfg.max_new_tokens, 1)
    whole_number("experiment.repeats", cfg.experiment.repeats, 1)
    whole_number("experiment.warmup", cfg.experiment.warmup, 0)


def run(cfg: DictConfig) -> dict:
    """Build from cfg, decode speculatively and plainly, write and return the result dict."""
    check_settings(cfg)
    with owned_output(cfg.output_dir, "experiments.run"), torch_threads(cfg.experiment.num_threads):
        return _run(cfg)


def _run(cfg: DictConfig) -> dict:
    model = instantiate(cfg.target)
    tokenizer = tokenizer_of(model)  # None for models built from a config (token-id prompts)
    target = HFTarget(model)
    make_proposer = instantiate(cfg.proposer)  # a factory (partial), or None for proposer=none
    sampling = instantiate(cfg.sampling)
    prompt = encode_prompt(cfg.prompt, tokenizer)  # [1, L]

    make_policy = policy_factory_of(cfg)
    policy = make_policy() if make_policy is not None else None  # one for every round: what it learns, it keeps

    spec_s, plain_s = [], []
    for round_ in range(cfg.experiment.warmup + cfg.experiment.repeats):
        proposer = make_proposer() if make_proposer is not None else None  # fresh proposer state
        spec, t_spec = timed_generate(target, proposer, prompt, cfg, sampling, policy=policy)
        plain, t_plain = timed_generate(target, None, prompt, cfg, sampling)
        if round_ >= cfg.experiment.warmup:
            spec_s.append(t_spec)
            plain_s.append(t_plain)

    tokens = emitted(spec)
    spec_median, plain_median = statistics.median(spec_s), statistics.median(plain_s)
    result = {
        **job_record(),
        "config": OmegaConf.to_container(cfg, resolve=True),
        "prompt": prompt[0].tolist(),
        "tokens": tokens,
        "plain_tokens": emitted(plain),
        "prompt_text": decode(prompt[0].tolist(), tokenizer),  # null without a tokenizer
        "text": decode(tokens, tokenizer),
        "plain_text": decode(emitted(plain), tokenizer),
        "stats": spec.stats.summary(),
        "plain_stats": plain.stats.summary(),
        "timing": "median",
        "wall_s": spec_median,
        "plain_wall_s": plain_median,
        "wall_s_all": spec_s,
        "plain_wall_s_all": plain_s,
        "tokens_per_s": len(tokens) / spec_median,
        "plain_tokens_per_s": len(emitted(plain)) / plain_median,
        "speedup": plain_median / spec_median,
        "placement": placement_of(model),  # one device, device_map ..., or tp N (framework/lm/sharding.py)
        "lossless": verifier_of(cfg).lossless,  # False for a lossy rule (verifier=typical): never a lossless speedup
    }
    if cfg.experiment.get("sampled"):  # one sampled continuation after the timed runs, reported as sampled
        law = instantiate(option("sampling", cfg.experiment.sampled, cfg, "experiment.sampled"))
        drawn, _ = timed_generate(target, make_proposer() if make_proposer is not None else None, prompt, cfg, law,
                                  policy=policy)
        result["sampled"] = {"sampling": cfg.experiment.sampled, "temperature": law.temperature,
                             "tokens": emitted(drawn), "text": decode(emitted(drawn), tokenizer)}
    if spec.logprobs is not None:  # row 0's emitted tokens: under the processed law, and the n best there
        kept = len(tokens)
        result["logprobs"] = spec.logprobs.chosen[0, :kept].tolist()
        result["top_logprobs"] = [dict(zip(ids, values)) for ids, values in
                                  zip(spec.logprobs.top_ids[0, :kept].tolist(), spec.logprobs.top[0, :kept].tolist())]
        result["plain_logprobs"] = plain.logprobs.chosen[0, : len(emitted(plain))].tolist()
    result["path"] = str(write_json(cfg.output_dir, "result.json", result))
    return result


def report(result: dict) -> str:
    s = result["stats"]
    setting = " | ".join(f"{k} {v}" for k, v in result["choices"].items())
    split = " | ".join(f"{k} {100 * s[f'{k}_frac']:.0f}%" for k in ("draft", "target", "verify", "other"))
    n = len(result["wall_s_all"])
    if result["text"] is None:
        shown = [f"prompt (ids):        {result['prompt']}", f"speculative (ids):   {result['tokens']}",
                 f"plain (ids):         {result['plain_tokens']}"]
    else:  # the same seed gives the same law, not the same text: the two continuations differ at t > 0
        shown = [f"--- prompt ({len(result['prompt'])} tokens)\n{result['prompt_text']}",
                 f"--- speculative ({len(result['tokens'])} tokens)\n{result['text']}",
                 f"--- plain ({len(result['plain_tokens'])} tokens)\n{result['plain_text']}", "---"]
    greedy = result["config"]["sampling"]["temperature"] == 0
    same = ([f"identical to plain decoding: {'yes' if result['tokens'] == result['plain_tokens'] else 'NO'} "
             f"(greedy: the speculative text must be plain decoding's, token for token)"] if greedy else
            ["(sampled: the two continuations are draws from the same law, not the same text)"])
    sampled = result.get("sampled")
    drawn = []
    if sampled:
        text = sampled["text"] if sampled["text"] is not None else sampled["tokens"]
        drawn = [f"--- sampled, speculative at T = {sampled['temperature']} ({sampled['sampling']}: one draw, "
                 f"not comparable token by token)\n{text}", "---"]
    return "\n".join([
        setting or "(composed without the Hydra CLI)",
        *shown,
        *same,
        *drawn,
        f"tokens per forward:  {s['tokens_per_forward']:.2f} (mean accepted {s['mean_accepted']:.2f} over "
        f"{s['steps']} target forwards)",
        f"wall time (median of {n}): speculative {result['wall_s']:.4f} s, plain {result['plain_wall_s']:.4f} s"
        f" -> speedup {result['speedup']:.2f}x ({result['tokens_per_s']:.0f} vs "
        f"{result['plain_tokens_per_s']:.0f} tokens/s)",
        f"time split (speculative loop {s['loop_s']:.4f} s, prefill {s['prefill_s']:.4f} s): {split}",
        f"result: {result['path']}",
    ])


@hydra.main(config_path="../conf", config_name="config", version_base="1.3")
def main(cfg: DictConfig) -> float:
    result = run(cfg)
    if writes_results():  # under torchrun: rank 0 reports, as it alone writes
        print(report(result))
    return result["speedup"]  # for sweepers that optimise a return value


if __name__ == "__main__":
    main()
