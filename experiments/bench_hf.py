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

import copy
import importlib.util
import inspect
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import hydra
import torch
import transformers
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra
from hydra.errors import MissingConfigException
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator

from experiments.run import emitted, timed_generate, torch_threads, write_json
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from framework.lm.text import encode_prompt, tokenizer_of
from framework.zoo.prompts import CATEGORIES, stdlib_prompt_sets

CONF = Path(__file__).resolve().parents[1] / "conf"
HF_METHODS = ("hf_plain", "hf_assisted", "hf_pld", "hf_pld_matched")
HF_ATTENTION = ("sdpa", "eager")
ASSISTANT_KEYS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")
_PLD = inspect.signature(PromptLookupCandidateGenerator.__init__).parameters
HF_PLD_DEFAULTS = {"num_tokens": _PLD["num_output_tokens"].default, "max_ngram": _PLD["max_matching_ngram_size"].default}


class ForwardCounter:
    """Counts a module's forward calls (a pre-hook: every call of model(...), whatever calls it)."""

    def __init__(self, model: torch.nn.Module):
        self.calls = 0
        model.register_forward_pre_hook(self._hook)

    def _hook(self, module, args) -> None:
        self.calls += 1


def _sync(model: torch.nn.Module) -> None:
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)


@contextmanager
def _hydra_conf() -> Iterator[None]:
    """compose() needs an initialised Hydra: the app's inside `python -m`, conf/ when called from Python."""
    if GlobalHydra.instance().is_initialized():
        yield
    else:
        with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
            yield


def option(group: str, name: str, run: DictConfig, where: str) -> DictConfig:
    """conf/<group>/<name>.yaml composed beside the run's own target and models (its ${target.*} and
    ${models.*} read those); `where` names the setting that asked for it, for the error."""
    try:
        with _hydra_conf():
            composed = compose(config_name="config", overrides=[f"{group}={name}"])
    except MissingConfigException as error:
        known = sorted(p.stem for p in (CONF / group).glob("*.yaml"))
        raise ValueError(f"{where}: no {group} config {name!r} (conf/{group} has {known})") from error
    composed.target = OmegaConf.create(OmegaConf.to_container(run.target, resolve=True))
    if "models" in run:
        composed.models = OmegaConf.create(OmegaConf.to_container(run.models, resolve=True))
    return composed[group]


def hf_sampling(sampling: SamplingConfig) -> dict:
    """generate() kwargs for the same law. Only temperature is mapped: transformers orders its
    warpers its own way, so top-k / top-p / min-p / penalties are refused rather than approximated."""
    if (sampling.top_k, sampling.top_p, sampling.min_p, sampling.repetition_penalty) != (0, 1.0, 0.0, 1.0):
        raise ValueError(f"only temperature maps to transformers' sampling here, got {sampling}")
    if sampling.greedy:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": sampling.temperature, "top_k": 0, "top_p": 1.0}


def assistant_schedule(assistant: torch.nn.Module) -> dict:
    """The assistant settings transformers will use: its generation config with transformers'
    global defaults filled in, as AssistedCandidateGenerator does. The confidence threshold adapts
    within a call (a ROC fit) only when scikit-learn is installed."""
    config = copy.deepcopy(assistant.generation_config)
    defaults = getattr(config, "_get_default_generation_params", dict)()  # older releases hold them in __init__
    config.update(**defaults, defaults_only=True)
    return {**{k: getattr(config, k) for k in ASSISTANT_KEYS},
            "threshold_adapts": importlib.util.find_spec("sklearn") is not None}


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


def build_methods(cfg: DictConfig, methods: list[str], proposers: dict, variants: dict):
    """name -> run(prompt [1, L], sampling) -> (new tokens, seconds, forwards, GenerationStats or None)."""
    ours_model, hf_model = instantiate(cfg.target), instantiate(cfg.target)
    if hf_model is ours_model:
        raise ValueError("cfg.target must build a fresh model per instantiate (transformers needs its own copy)")
    target = HFTarget(ours_model)  # switches ours_model to the speculum_tree attention
    hf_attention = hf_model.config._attn_implementation
    if hf_attention not in HF_ATTENTION:
        raise ValueError(f"transformers' copy runs {hf_attention!r} attention, expected one of {HF_ATTENTION}")
    ours_calls, hf_calls = ForwardCounter(ours_model), ForwardCounter(hf_model)
    tokens = cfg.experiment.max_new_tokens
    settings = {"hf_attention": hf_attention, "ours_attention": ours_model.config._attn_implementation,
                "hf_pld": variants, "transformers": transformers.__version__, "torch": torch.__version__}
    assistant = None
    if "hf_assisted" in methods:
        node = option("proposer", cfg.experiment.assistant, cfg, "experiment.assistant")
        if "draft_model" not in node:
            raise ValueError(f"experiment.assistant={cfg.experiment.assistant!r} has no draft_model to lend transformers")
        assistant = instantiate(node.draft_model)  # its own instance: our proposer's copy runs speculum_tree
        settings["assistant"] = {"config": cfg.experiment.assistant, **assistant_schedule(assistant)}

    def ours(make_proposer) -> Callable:
        def run(prompt: torch.Tensor, sampling: SamplingConfig):
            before = ours_calls.calls
            _sync(ours_model)
            out, seconds = timed_generate(target, make_proposer() if make_proposer else None, prompt, cfg, sampling, tokens)
            return emitted(out), seconds, ours_calls.calls - before, out.stats
        return run

    def hf(extra: dict) -> Callable:
        def run(prompt: torch.Tensor, sampling: SamplingConfig):
            ids = prompt.to(next(hf_model.parameters()).device)
            before = hf_calls.calls
            torch.manual_seed(cfg.seed)  # transformers samples from torch's global generator
            _sync(hf_model)
            start = time.perf_counter()
            out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                                    min_new_tokens=tokens, eos_token_id=None,
                                    pad_token_id=hf_model.generation_config.pad_token_id, **hf_sampling(sampling), **extra)
            new = out[0, ids.shape[1]:].tolist()  # .tolist() waits for the device
            return new, time.perf_counter() - start, hf_calls.calls - before, None
        return run

    def lookup(name: str) -> dict:
        return {"prompt_lookup_num_tokens": variants[name]["num_tokens"], "max_matching_ngram_size": variants[name]["max_ngram"]}

    runners = {"hf_plain": lambda: hf({}), "hf_assisted": lambda: hf({"assistant_model": assistant}),
               "hf_pld": lambda: hf(lookup("hf_pld")), "hf_pld_matched": lambda: hf(lookup("hf_pld_matched")),
               "ours_plain": lambda: ours(None)}
    built = {m: runners[m]() if m in runners else ours(instantiate(proposers[m])) for m in methods}
    return built, settings, ours_model


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


def full_length_only(cfg: DictConfig) -> None:
    if cfg.eos_token_id is not None:
        raise ValueError("every method runs to max_new_tokens here (transformers' EOS is off too): leave eos_token_id null")


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
