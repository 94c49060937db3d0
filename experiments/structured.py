"""Structured output on the configured target: every method under a grammar, against constrained plain decoding.

    python -m experiments.structured                                   # the zoo, grammar=json_record, greedy
    python -m experiments.structured grammar=call_ebnf 'experiment.methods=[draft]'

Per method, over experiment.prompts: the share of outputs the grammar's language accepts (a JSON schema's by
json.loads and this file's own check of its types, keys and bounds; a regex's by Python's re; an EBNF's by a
fresh matcher of the grammar engine), greedy identity with constrained plain decoding, tokens per forward and
the speedup (medians of interleaved rounds). The grammar's cost: its masks along a chain of
`experiment.tree_nodes` nodes (the chain of a valid output: every node walked) and the advance by the tokens a
step emits, against the target's forward of that chain, each the median of 20 timings; and, in the real runs,
the grammar's seconds per step against the target's (a timing proxy around the constraint).
"""

from __future__ import annotations

import json
import re
import statistics
import time

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from framework.constraints.grammar import Grammar, GrammarConstraint
from framework.core.tree import CandidateTree
from framework.lm.target import HFTarget
from framework.lm.text import encode_prompt, tokenizer_of
from measurement.common import (
    constraint_of,
    one_process,
    option,
    owned_output,
    stop_token_of,
    timed_generate,
    torch_threads,
    write_json,
)
from verifiers import Verification


def schema_errors(value, schema: dict, where: str = "$") -> list[str]:
    """The JSON-schema keywords conf/grammar uses (type, properties, required, additionalProperties, items,
    maxLength, minimum, maximum, maxItems), checked by hand: independent of the grammar engine."""
    kinds = {"object": dict, "array": list, "string": str, "boolean": bool, "integer": int}
    kind = schema.get("type")
    if kind and (not isinstance(value, kinds[kind]) or (kind == "integer" and isinstance(value, bool))):
        return [f"{where}: not a {kind}"]
    errors = []
    if kind == "object":
        errors += [f"{where}: no {key}" for key in schema.get("required", []) if key not in value]
        properties = schema.get("properties", {})
        if schema.get("additionalProperties") is False:
            errors += [f"{where}: extra {key}" for key in value if key not in properties]
        for key, sub in properties.items():
            if key in value:
                errors += schema_errors(value[key], sub, f"{where}.{key}")
    if kind == "array":
        errors += ([f"{where}: over {schema['maxItems']} items"] if len(value) > schema.get("maxItems", len(value))
                   else [])
        errors += [e for i, item in enumerate(value)
                   for e in schema_errors(item, schema.get("items", {}), f"{where}[{i}]")]
    if kind == "string" and len(value) > schema.get("maxLength", len(value)):
        errors.append(f"{where}: longer than {schema['maxLength']}")
    if kind == "integer" and not schema.get("minimum", value) <= value <= schema.get("maximum", value):
        errors.append(f"{where}: out of range")
    return errors


def valid(text: str, tokens: list[int], grammar: Grammar, fresh: GrammarConstraint, stop: int) -> bool:
    """The output is a whole sentence of the grammar's language and ended with the stop token."""
    if not tokens or tokens[-1] != stop:
        return False  # cut short by the budget
    if grammar.json_schema is not None:
        try:
            value = json.loads(text)
        except json.JSONDecodeError:
            return False
        return not schema_errors(value, dict(grammar.json_schema))
    if grammar.regex is not None:
        return re.fullmatch(grammar.regex, text) is not None
    fresh.start(1)
    try:
        fresh.advance(torch.tensor([tokens]))
    except ValueError:
        return False
    return fresh.finished()[0]


class TimedConstraint:
    """A constraint that keeps the seconds spent in it (masks and advances)."""

    def __init__(self, inner):
        self.inner, self.vocab_size, self.seconds = inner, inner.vocab_size, 0.0

    def _timed(self, method, *args):
        start = time.perf_counter()
        try:
            return getattr(self.inner, method)(*args)
        finally:
            self.seconds += time.perf_counter() - start

    def start(self, batch_size):
        return self._timed("start", batch_size)

    def allowed(self, tokens, shape, rows=None):
        return self._timed("allowed", tokens, shape, rows)

    def advance(self, tokens):
        return self._timed("advance", tokens)

    def select(self, rows):
        return self._timed("select", rows)


def median_seconds(action, repeats: int = 20) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        action()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def chain_cost(constraint: GrammarConstraint, target: HFTarget, prompt: torch.Tensor, chain: list[int]) -> dict:
    """The grammar's masks along `chain` (from the start state) plus an advance of two tokens, against the
    target's forward of the same chain after the prompt."""
    tree = CandidateTree.chain(torch.tensor([chain]))

    def grammar_step():
        constraint.start(1)
        constraint.allowed(tree.tokens, tree.shape)
        constraint.advance(tree.tokens[:, :2])

    root = prompt[:, -1].to(target.device)
    target.prefill(prompt[:, :-1])
    nothing = Verification(torch.tensor([[-1] * (len(chain) + 1)]), torch.zeros(1, dtype=torch.long),
                           torch.full((1, len(chain)), -1))

    def target_step():
        target.forward_tree(root, tree)
        target.commit(nothing)  # the pending rows dropped: every timing forwards the same chain

    with torch.no_grad():
        grammar_s, target_s = median_seconds(grammar_step), median_seconds(target_step)
    return {"nodes": len(chain), "grammar_ms": 1e3 * grammar_s, "target_forward_ms": 1e3 * target_s,
            "grammar_share": grammar_s / target_s}


def run(cfg: DictConfig) -> dict:
    one_process("experiments.structured")
    with owned_output(cfg.output_dir, "experiments.structured"), torch_threads(cfg.experiment.num_threads):
        return _run(cfg)


def _run(cfg: DictConfig) -> dict:
    if cfg.grammar is None:
        raise ValueError("experiments.structured needs a grammar: grammar=json_record, identifier_list or call_ebnf")
    model = instantiate(cfg.target)
    target, tokenizer = HFTarget(model), tokenizer_of(model)
    sampling = instantiate(cfg.sampling)
    grammar = instantiate(cfg.grammar, _convert_="object")
    stop = stop_token_of(cfg, target)
    constraint = constraint_of(cfg, target)
    fresh = GrammarConstraint(grammar, tokenizer, target.vocab_size, [stop])
    prompts = [encode_prompt(p, tokenizer) for p in cfg.experiment.prompts]
    runs = OmegaConf.merge(cfg, {"max_new_tokens": cfg.experiment.max_new_tokens})
    methods = {"plain": None} | {m: instantiate(option("proposer", m, cfg, "experiment.methods"))
                                 for m in cfg.experiment.methods}
    rows: dict[str, dict] = {name: {"tokens": [], "seconds": [], "forwards": 0, "grammar_s": 0.0, "target_s": 0.0}
                             for name in methods}
    for prompt in prompts:
        for round_ in range(cfg.experiment.repeats + 1):  # round 0 warms up, untimed
            for name, make in methods.items():
                timing = TimedConstraint(constraint)  # the run's own constraint, its seconds kept
                out, seconds = timed_generate(target, make() if make else None, prompt, runs, sampling,
                                              constraint=timing)
                if round_ == 0:
                    continue
                row = rows[name]
                row["seconds"].append(seconds)
                if round_ == 1:
                    row["tokens"].append([t for t in out.tokens[0].tolist() if t >= 0])
                    row["forwards"] += out.stats.target_forwards + 1
                    row["grammar_s"] += timing.seconds
                    row["target_s"] += out.stats.summary()["target_s"] + out.stats.prefill_s
    plain = rows["plain"]
    result = {"config": OmegaConf.to_container(cfg, resolve=True), "methods": {}}
    long_enough = []  # valid outputs with more tokens than the chain the grammar's cost is measured on
    for name, row in rows.items():
        texts = [tokenizer.decode(t[:-1] if t and t[-1] == stop else t) for t in row["tokens"]]
        ok = [valid(text, tokens, grammar, fresh, stop) for text, tokens in zip(texts, row["tokens"])]
        long_enough += [t for t, good in zip(row["tokens"], ok) if good and len(t) > cfg.experiment.tree_nodes]
        result["methods"][name] = {
            "valid": sum(ok) / len(ok),
            "greedy_identical": sum(a == b for a, b in zip(row["tokens"], plain["tokens"])) / len(prompts),
            "tokens_per_forward": sum(map(len, row["tokens"])) / row["forwards"],
            "seconds": statistics.median(row["seconds"]),
            "speedup": statistics.median(plain["seconds"]) / statistics.median(row["seconds"]),
            "grammar_share_of_target": row["grammar_s"] / row["target_s"],
            "texts": texts,
        }
    if long_enough:  # the chain of a valid output: every node walked
        result["chain_cost"] = chain_cost(fresh, target, prompts[0], long_enough[0][: cfg.experiment.tree_nodes])
    result["path"] = str(write_json(cfg.output_dir, "result.json", result))
    return result


def report(result: dict) -> str:
    lines = ["| method | valid | greedy identical | tokens/forward | speedup | grammar / target time |",
             "|---|---:|---:|---:|---:|---:|"]
    for name, m in result["methods"].items():
        lines.append(f"| {name} | {100 * m['valid']:.0f}% | {100 * m['greedy_identical']:.0f}% | "
                     f"{m['tokens_per_forward']:.2f} | {m['speedup']:.2f}x | "
                     f"{100 * m['grammar_share_of_target']:.1f}% |")
    if "chain_cost" in result:
        c = result["chain_cost"]
        lines.append(f"grammar on a {c['nodes']}-node chain: {c['grammar_ms']:.3f} ms vs the target's forward "
                     f"{c['target_forward_ms']:.2f} ms ({100 * c['grammar_share']:.1f}%)")
    example = result["methods"]["plain"]["texts"][0]
    lines += [f"first output (plain): {example!r}", f"result: {result['path']}"]
    return "\n".join(lines)


@hydra.main(config_path="../conf", config_name="structured", version_base="1.3")
def main(cfg: DictConfig) -> None:
    print(report(run(cfg)))


if __name__ == "__main__":
    main()
