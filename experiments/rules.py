"""Tokens per target forward of each verification rule against the first (verifier=token), in one run.

    python -m experiments.rules                                   # zoo draft chain, a draft tree, EAGLE-2; T = 1, 0.7
    python -m experiments.rules 'experiment.proposers=[draft]' experiment.prompts=4 experiment.variants=null

The figure compared is exact per step: the decode runs with the first rule, and at each of its steps
every rule's expected accepted nodes on that step's tree and target laws is computed by enumerating
its coins (measurement/expected_acceptance.py): the same drafts, no coin noise. Tokens per forward =
1 + mean expected accepted. The drafts are still one draw per step: each ratio carries the standard
error of its paired per-step differences (the draft's noise; +-2 s.e. is a 95% interval). Each rule also
decodes on its own (same prompts and seeds) for the sampled figure, whose noise is several percent at a
thousand steps. Writes <output_dir>/rules.json (rules.jsonl as it goes) and prints a Markdown table with
each rule's ratio to the first rule's.
"""

from __future__ import annotations

import json
from pathlib import Path

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from engine.loop import DecodeOptions, generate
from framework.core import files
from framework.lm.target import HFTarget
from framework.lm.text import encode_prompt, tokenizer_of
from framework.zoo.prompts import stdlib_prompt_sets
from measurement.common import option, torch_threads
from measurement.expected_acceptance import ExpectedAcceptance


def measure(cfg: DictConfig, progress: Path | None = None) -> list[dict]:
    """Every (proposer, sampling, verifier) cell; each finished row is appended to `progress` (JSON lines)
    as it comes, so an interrupted run keeps what it measured."""
    exp = cfg.experiment
    model = instantiate(cfg.target)
    target = HFTarget(model)
    prompts = [encode_prompt(t, tokenizer_of(model))
               for t in stdlib_prompt_sets()[exp.category]["prompt"][: exp.prompts]]
    nodes = {name: option("proposer", name, cfg, "experiment.proposers") for name in exp.proposers}
    for label, variant in (exp.get("variants") or {}).items():
        node = option("proposer", variant.config, cfg, f"experiment.variants.{label}")
        unknown = set(variant.set) - set(node)
        if unknown:
            raise ValueError(f"experiment.variants.{label}: {sorted(unknown)} are not settings of "
                             f"proposer={variant.config}")
        nodes[label] = OmegaConf.merge(node, variant.set)
    rows = []
    for proposer_name, node in nodes.items():
        make = instantiate(node)
        for sampling_name in exp.samplings:
            sampling = instantiate(option("sampling", sampling_name, cfg, "experiment.samplings"))
            verifiers = {name: instantiate(option("verifier", name, cfg, "experiment.verifiers"))
                         for name in exp.verifiers}
            # the first rule decodes; every rule's exact expected acceptance is taken on its steps' trees
            measured = ExpectedAcceptance(next(iter(verifiers.values())), verifiers)
            sampled = {}
            for verifier_name, verifier in verifiers.items():
                if verifier_name != exp.verifiers[0] and not exp.sampled:
                    continue
                steps = emitted = 0
                for i, prompt in enumerate(prompts):
                    decoding = measured if verifier_name == exp.verifiers[0] else verifier
                    out = generate(target, make(), prompt, exp.max_new_tokens, sampling, seed=cfg.seed + i,
                                   options=DecodeOptions(verifier=decoding))
                    steps += out.stats.summary()["steps"]
                    emitted += int((out.tokens >= 0).sum()) - 1  # the prefill's root token is no step's
                sampled[verifier_name] = emitted / steps
            for verifier_name, verifier in verifiers.items():
                rows.append({"proposer": proposer_name, "sampling": sampling_name, "verifier": verifier_name,
                             "lossless": verifier.lossless, "steps": measured.steps,
                             "tokens_per_forward": measured.tokens_per_forward(verifier_name),
                             "ratio_standard_error": measured.ratio_standard_error(verifier_name, exp.verifiers[0]),
                             "sampled_tokens_per_forward": sampled.get(verifier_name)})
                if progress is not None:
                    files.append_line(progress, json.dumps(rows[-1]))
                print(f"{proposer_name} {sampling_name} {verifier_name}: {rows[-1]['tokens_per_forward']:.3f} "
                      f"expected, {sampled.get(verifier_name)} sampled tokens per forward", flush=True)
    return rows


def _or_dash(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def table(rows: list[dict]) -> str:
    reference = {(r["proposer"], r["sampling"]): r["tokens_per_forward"] for r in rows
                 if r["verifier"] == rows[0]["verifier"]}
    lines = ["| proposer | sampling | verifier | tokens per forward (expected) | "
             "vs " + rows[0]["verifier"] + " | ± (s.e.) | sampled |",
             "|---|---|---|---:|---:|---:|---:|"]
    for r in rows:
        ratio = r["tokens_per_forward"] / reference[(r["proposer"], r["sampling"])]
        lines.append(f"| {r['proposer']} | {r['sampling']} | {r['verifier']}{'' if r['lossless'] else ' (lossy)'} | "
                     f"{r['tokens_per_forward']:.3f} | {ratio:.3f}x | {_or_dash(r.get('ratio_standard_error'))} | "
                     f"{_or_dash(r['sampled_tokens_per_forward'])} |")
    return "\n".join(lines)


@hydra.main(config_path="../conf", config_name="rules", version_base="1.3")
def main(cfg: DictConfig) -> None:
    path = Path(cfg.output_dir) / "rules.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    with torch_threads(cfg.experiment.num_threads), torch.no_grad():
        rows = measure(cfg, path.with_suffix(".jsonl"))
    files.write_json(path, rows)
    print(table(rows))


if __name__ == "__main__":
    main()
