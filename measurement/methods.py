"""The decoding methods a measurement times side by side: ours (plain or with a proposer) and transformers'
own generate (plain, assisted, prompt lookup, the checkpoint's MTP modules), each a runner (prompts [B, L],
sampling, policy) -> (new tokens per row, seconds, forwards, stats). transformers' runners decode one prompt
(B = 1) under their own schedule.

A library of experiments.compare (and its presets experiment=bench_hf, categories); not an entry point.
"""

from __future__ import annotations

import atexit
import copy
import functools
import importlib.util
import inspect
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import torch
import transformers
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf
from transformers.generation.candidate_generator import PromptLookupCandidateGenerator
from transformers.generation.streamers import BaseStreamer

from engine.loop import GenerationStats
from framework.core.proposer import SharedStore
from framework.core.sampling import SamplingConfig, hf_sampling
from framework.lm.target import HFTarget
from framework.lm.text import tokenizer_of
from framework.metrics.engine_counters import EngineCounters
from measurement.common import option, timed_generate
from measurement.peers.arctic_suffix import ArcticSuffixProposer
from measurement.peers.engine import PeerWorker
from measurement.peers.rows import ARCTIC_ROW, peer_runners
from proposers.common.head_files import safetensors_keys

# one prompt at a time, no policy
HF_METHODS = ("hf_plain", "hf_assisted", "hf_pld", "hf_pld_matched", "hf_mtp", "hf_early_exit")


HF_ATTENTION = ("sdpa", "eager")


ASSISTANT_KEYS = ("num_assistant_tokens", "num_assistant_tokens_schedule", "assistant_confidence_threshold")


_PLD = inspect.signature(PromptLookupCandidateGenerator.__init__).parameters


HF_PLD_DEFAULTS = {"num_tokens": _PLD["num_output_tokens"].default,
                   "max_ngram": _PLD["max_matching_ngram_size"].default}


class ForwardCounter:
    """Counts a module's full forward calls (a pre-hook: every call of model(...), whatever calls it), less those
    made while transformers' early exit has cut its stack (assistant_early_exit drafts with the model itself,
    lowering config.num_hidden_layers for the draft's calls): those are draft calls, not target forwards."""

    def __init__(self, model: torch.nn.Module):
        self.calls = 0
        self.layers = getattr(model.config, "num_hidden_layers", None)
        model.register_forward_pre_hook(self._hook)

    def _hook(self, module, args) -> None:
        self.calls += getattr(module.config, "num_hidden_layers", None) == self.layers


def _sync(model: torch.nn.Module) -> None:
    device = next(model.parameters()).device
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def assistant_schedule(assistant: torch.nn.Module) -> dict:
    """The assistant settings transformers will use: its generation config with transformers'
    global defaults filled in, as AssistedCandidateGenerator does. The confidence threshold adapts
    within a call (a ROC fit) only when scikit-learn is installed."""
    config = copy.deepcopy(assistant.generation_config)
    defaults = getattr(config, "_get_default_generation_params", dict)()  # older releases hold them in __init__
    config.update(**defaults, defaults_only=True)
    return {**{k: getattr(config, k) for k in ASSISTANT_KEYS},
            "threshold_adapts": importlib.util.find_spec("sklearn") is not None}


def draft_vocabulary(proposer) -> int | None:
    """The vocabulary a proposer's learnt drafter writes in: a head's draft vocabulary (EAGLE-3's may be pruned),
    else a draft model's; None for model-free proposers."""
    for part in vars(proposer).values():
        for module in (part, getattr(part, "model", None)):  # a head, or a draft model behind its runtime (CachedLM)
            config = getattr(module, "config", None) if isinstance(module, torch.nn.Module) else None
            size = getattr(config, "draft_vocab_size", None) or getattr(config, "vocab_size", None)
            if isinstance(size, int):
                return size
    return None


def method_settings(name: str, node, make_proposer) -> dict:
    """What a results page says of a method: its resolved config and its draft vocabulary."""
    return {"config": OmegaConf.to_container(node, resolve=True), "draft_vocabulary": draft_vocabulary(make_proposer())}


@dataclass
class Timed:
    """One timed generation: new tokens per row, its clock, the target's forwards, and ours' per-step stats
    (transformers' runners have none: their first-token time comes from a streamer instead)."""

    tokens: list[list[int]]
    seconds: float
    forwards: int
    stats: GenerationStats | None = None
    ttft_s: float | None = None
    counters: EngineCounters | None = None  # a peer engine's speculative-decoding counters over the run
    engine: str = "speculum"  # who decoded: ours, or a peer engine (measurement.peers)


class FirstTokenClock(BaseStreamer):
    """transformers' streamer hook as a clock: generate puts the prompt first, then new tokens as they come."""

    def __init__(self, start: float):
        self.start, self.puts, self.ttft_s = start, 0, None

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == 2:
            self.ttft_s = time.perf_counter() - self.start

    def end(self) -> None:
        pass


def renewed(factory):
    """A proposer factory (a Hydra partial) whose shared stores, in it or in the partials and containers it holds (a
    mix's parts), are renewed (framework.core.proposer.SharedStore); drafter weights and every other argument stay
    the same objects."""
    def fresh(value):  # the same object where nothing in it is renewed
        if isinstance(value, functools.partial):
            return renewed(value)
        if isinstance(value, SharedStore):
            return value.renewed()
        if isinstance(value, Mapping):  # a mix's parts by name
            items = {k: fresh(v) for k, v in value.items()}
            return items if any(items[k] is not v for k, v in value.items()) else value
        if isinstance(value, (list, tuple, ListConfig)):
            items = [fresh(v) for v in value]
            return items if any(a is not b for a, b in zip(items, value)) else value
        return value
    if not isinstance(factory, functools.partial):
        return factory
    args, keywords = [fresh(a) for a in factory.args], {k: fresh(v) for k, v in factory.keywords.items()}
    if all(a is b for a, b in zip(args, factory.args)) and all(keywords[k] is v for k, v in factory.keywords.items()):
        return factory
    return functools.partial(factory.func, *args, **keywords)


def build_methods(cfg: DictConfig, methods: list[str], proposers: dict, variants: dict):
    """name -> run(prompt [B, L], sampling, policy=None) -> Timed; transformers' runners take B = 1 and no
    policy."""
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
    assistant, assisted = None, {}
    if "hf_assisted" in methods:
        node = option("proposer", cfg.experiment.assistant, cfg, "experiment.assistant")
        if "draft_model" not in node:
            raise ValueError(f"experiment.assistant={cfg.experiment.assistant!r} has no draft_model "
                             "to lend transformers")
        assistant = instantiate(node.draft_model)  # its own instance: our proposer's copy runs speculum_tree
        assisted = {"assistant_model": assistant, **other_tokenizer(hf_model, assistant)}
        settings["assistant"] = {"config": cfg.experiment.assistant, **assistant_schedule(assistant),
                                 "universal": bool(assisted.keys() - {"assistant_model"})}

    def ours(make_proposer, for_cell: Callable | None = None) -> Callable:
        """for_cell(cell) -> the factory of that cell's proposers (default: make_proposer's shared stores renewed
        once per cell, so one cell's requests never draft from another's answers to the same prompts)."""
        cells: dict = {}
        for_cell = for_cell or (lambda _: renewed(make_proposer))

        def run(prompt: torch.Tensor, sampling: SamplingConfig, policy=None, cell=None):
            make = make_proposer
            if make_proposer is not None and cell is not None:
                if cell not in cells:
                    cells[cell] = for_cell(cell)
                make = cells[cell]
            before = ours_calls.calls
            _sync(ours_model)
            out, seconds = timed_generate(target, make() if make else None, prompt, cfg, sampling, tokens,
                                          policy=policy)
            return Timed([[t for t in row if t >= 0] for row in out.tokens.tolist()], seconds,
                         ours_calls.calls - before, out.stats, out.stats.prefill_s)
        return run

    def hf(extra: dict) -> Callable:
        # generate keeps nothing across calls
        def run(prompt: torch.Tensor, sampling: SamplingConfig, policy=None, cell=None):
            if prompt.shape[0] != 1 or policy is not None:
                raise ValueError("transformers' runners decode one prompt at a time, under their own schedule "
                                 "(no policy)")
            ids = prompt.to(next(hf_model.parameters()).device)
            before = hf_calls.calls
            torch.manual_seed(cfg.seed)  # transformers samples from torch's global generator
            _sync(hf_model)
            start = time.perf_counter()
            clock = FirstTokenClock(start)
            out = hf_model.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=tokens,
                                    min_new_tokens=tokens, eos_token_id=None, streamer=clock,
                                    pad_token_id=hf_model.generation_config.pad_token_id, **hf_sampling(sampling),
                                    **extra)
            new = out[0, ids.shape[1]:].tolist()  # .tolist() waits for the device
            return Timed([new], time.perf_counter() - start, hf_calls.calls - before, None, clock.ttft_s)
        return run

    def early_exit() -> Callable:
        """transformers' assistant_early_exit at the exit our early_exit row drafts from (or experiment.hf_exit_layer):
        an exit `auto` chooses is measured on the first prompt this row decodes, as ours measures it."""
        chosen: dict = {}

        def run(prompt: torch.Tensor, sampling: SamplingConfig, policy=None, cell=None):
            if not chosen:
                exit_layer = cfg.experiment.hf_exit_layer
                if exit_layer is None:
                    ours_exit = instantiate(option("proposer", "early_exit", cfg, "experiment.methods"))()
                    exit_layer = ours_exit.exit_layer_for(ours_model, prompt)  # the choice our row remembers
                chosen["run"] = hf({"assistant_early_exit": int(exit_layer)})
                settings["hf_early_exit"] = {"exit_layer": int(exit_layer)}
            return chosen["run"](prompt, sampling, policy)
        return run

    def arctic() -> Callable:
        """arctic-inference's suffix cache (its own environment) drafting for our loop, at our suffix config's
        settings; one worker for the run, so its global cache of responses grows as ours does."""
        suffix = option("proposer", "suffix", cfg, "experiment.methods")
        worker = PeerWorker("arctic")
        atexit.register(worker.close)
        def open_cache(name: str) -> dict:
            return worker.ask({"op": "open", "cache": name, "max_tree_depth": int(suffix.cache.max_depth),
                               "max_cached_requests": -1})
        opened = open_cache("")
        matched = {k: suffix[k] for k in ("max_budget", "max_spec_factor", "min_prob", "max_match")}
        settings[ARCTIC_ROW] = {**opened, "settings": dict(matched), "max_tree_depth": int(suffix.cache.max_depth)}
        last: list = []

        def factory(cache: str) -> Callable:
            def fresh() -> ArcticSuffixProposer:  # the previous generation's requests end (their outputs stay cached)
                if last:
                    last.pop().close()
                last.append(ArcticSuffixProposer(worker, cache=cache, **matched))
                return last[-1]
            return fresh

        def for_cell(cell) -> Callable:  # a cache of the worker's own per cell, as ours renews its own
            open_cache(repr(cell))
            return factory(repr(cell))
        return ours(factory(""), for_cell)

    def lookup(name: str) -> dict:
        return {"prompt_lookup_num_tokens": variants[name]["num_tokens"],
                "max_matching_ngram_size": variants[name]["max_ngram"]}

    runners = {"hf_plain": lambda: hf({}), "hf_assisted": lambda: hf(assisted),
               "hf_pld": lambda: hf(lookup("hf_pld")), "hf_pld_matched": lambda: hf(lookup("hf_pld_matched")),
               "hf_mtp": lambda: hf({"use_mtp": True}),  # the checkpoint's own modules (compare's probe checked them)
               "hf_early_exit": early_exit, ARCTIC_ROW: arctic,
               "ours_plain": lambda: ours(None)}
    peers, settings["peers"] = peer_runners(cfg, methods, Timed)  # vLLM's rows: workers in its own environment
    runners.update({name: (lambda run=run: run) for name, run in peers.items()})
    factories = {m: instantiate(proposers[m]) for m in methods if m not in runners}
    settings["methods"] = {m.removeprefix("ours_"): method_settings(m, proposers[m], make)
                           for m, make in factories.items()}
    settings["target_vocabulary"] = ours_model.config.vocab_size
    built = {m: runners[m]() if m in runners else ours(factories[m]) for m in methods}
    return built, settings, ours_model


def transformers_mtp_refusal(model) -> str | None:
    """Why transformers' generate(use_mtp=True) cannot draft with this checkpoint's own MTP modules, or None. Its
    MtpModel re-reads the checkpoint folder for the keys its class names as MTP (`_keys_to_ignore_on_load_unexpected`:
    its published checkpoints' layer numbers), so a folder whose modules sit elsewhere would draft with modules
    never loaded: refused here rather than timed."""
    from transformers.modeling_layers import MtpModel

    name = type(model).__name__
    count = getattr(model.config.get_text_config(), "num_mtp_layers", None)
    if not count:
        return f"transformers' use_mtp needs MTP modules: {name}'s config states none (num_mtp_layers)"
    try:
        wanted = MtpModel.get_mtp_weights_regex(model)
    except ValueError as error:
        return f"transformers' use_mtp: {error}"
    folder = Path(model.config.name_or_path)
    if not any(wanted.search(key) for key in safetensors_keys(sorted(folder.glob("*.safetensors")))):
        return (f"transformers' {name} reads its MTP modules from keys matching {wanted.pattern} (its published "
                f"checkpoints' layers); the safetensors of {folder} hold none, so use_mtp would draft with modules it "
                "never loaded")
    return None


def other_tokenizer(model, assistant) -> dict:
    """transformers' universal assisted generation when the assistant's tokenizer is another (its
    AssistedCandidateGeneratorDifferentTokenizers at greedy, UniversalSpeculativeDecodingGenerator when sampling:
    generate routes there when given both tokenizers); nothing to add when the two share one."""
    target_tokenizer, assistant_tokenizer = tokenizer_of(model), tokenizer_of(assistant)
    if (target_tokenizer is None or assistant_tokenizer is None
            or target_tokenizer.get_vocab() == assistant_tokenizer.get_vocab()):
        return {}
    return {"tokenizer": target_tokenizer, "assistant_tokenizer": assistant_tokenizer}


def full_length_only(cfg: DictConfig) -> None:
    if cfg.eos_token_id is not None:
        raise ValueError("every method runs to max_new_tokens here (transformers' EOS is off too): "
                         "leave eos_token_id null")
