"""vLLM's rows in experiments.compare: each row one worker (measurement.peers.engine) holding the run's target
under one of vLLM's speculative settings (experiment.vllm.rows), decoding the same prompts, the same budget and
the same sampling as ours; its counters come back in our definitions (framework.metrics.engine_counters).

A library of experiments.compare; not an entry point.
"""

from __future__ import annotations

import atexit
from collections.abc import Callable
from pathlib import Path

import torch
from omegaconf import DictConfig, OmegaConf

from framework.core.prompts import prompt_rows
from framework.core.sampling import SamplingConfig
from framework.zoo.checkpoints import resolve_checkpoint
from measurement.peers.engine import PeerEngine, PeerMissing, peer_python

PEER = "vllm"
ROWS = ("vllm_plain", "vllm_draft", "vllm_ngram", "vllm_eagle3", "vllm_speculum_pld")  # experiment.vllm.rows' keys
OWN_PLAIN = "vllm_plain"  # the row every vLLM speedup is also taken against (each engine against its own plain)
# arctic-inference's suffix cache drafting in our loop (measurement/peers/arctic_suffix.py)
ARCTIC_ROW = "arctic_suffix"


def peer_sampling(sampling: SamplingConfig) -> dict:
    """vLLM SamplingParams fields for the same law. Temperature maps; top-k / top-p / min-p / penalties / biases
    are refused rather than approximated (vLLM orders its processors its own way)."""
    if (sampling.top_k, sampling.top_p, sampling.min_p, sampling.repetition_penalty, sampling.logit_bias) != \
            (0, 1.0, 0.0, 1.0, ()):
        raise ValueError(f"only temperature maps to vLLM's sampling here, got {sampling}")
    return {"temperature": float(sampling.temperature)}


def speculative_config(row: DictConfig | None) -> dict | None:
    """A row's speculative_config with its model folders resolved (a zoo name, e.g. `draft`, or a path);
    a custom-class row names a Python class and keeps it."""
    if row is None:
        return None
    config = OmegaConf.to_container(row, resolve=True)
    if config.get("model") is not None and config.get("method") != "custom_class":
        config["model"] = str(resolve_checkpoint(config["model"]))
    return config


def target_folder(cfg: DictConfig) -> Path:
    path = cfg.target.get("path")
    if path is None:
        raise ValueError("vLLM's rows load the target from a folder: target.path (a random tiny target has none)")
    return resolve_checkpoint(path)


def missing_rows(cfg: DictConfig, methods: list[str]) -> dict[str, str]:
    """The peer rows listed (vLLM's, arctic's) whose environment is absent -> the line that says how to build it."""
    missing = {}
    for peer, python, rows in ((PEER, cfg.experiment.vllm.python, [m for m in methods if m in ROWS]),
                               ("arctic", None, [m for m in methods if m == ARCTIC_ROW])):
        try:
            if rows:
                peer_python(peer, python)
        except PeerMissing as why:
            missing.update({m: str(why) for m in rows})
    return missing


def peer_runners(cfg: DictConfig, methods: list[str], timed: Callable) -> tuple[dict, dict]:
    """name -> run(prompt [B, L], sampling, policy=None) -> timed(...) for the vLLM rows listed, and their settings.
    Each row's worker starts here (a model load) and closes at exit."""
    rows = [m for m in methods if m in ROWS]
    if not rows:
        return {}, {}
    settings = cfg.experiment.vllm
    unknown = [m for m in rows if m not in settings.rows]
    if unknown:
        raise ValueError(f"experiment.vllm.rows has no settings for {unknown} (have {list(settings.rows)})")
    folder, dtype = target_folder(cfg), cfg.target.get("dtype", "float32")
    runners, described = {}, {}
    for name in rows:
        engine = PeerEngine(PEER, folder, int(settings.max_model_len), speculative_config(settings.rows[name]), dtype,
                            int(cfg.experiment.num_threads or 1), int(cfg.seed), settings.python,
                            int(settings.kv_cache_gib), worker_env=proposer_env(settings, name))
        atexit.register(engine.close)
        runners[name] = runner(engine, int(cfg.experiment.max_new_tokens), timed)
        node = settings.rows[name]
        described[name] = {"speculative_config": None if node is None else OmegaConf.to_container(node, resolve=True),
                           "versions": engine.versions}  # the config as named (zoo names, not this machine's paths)
    return runners, described


def serving_runner(cfg: DictConfig, name: str) -> Callable:
    """run(requests, sampling, concurrency) for measurement/throughput.py: vLLM serving every request (all arrived)
    with at most `concurrency` decoding together (its max_num_seqs: one worker per concurrency, loaded at first use)."""
    settings = cfg.experiment.vllm
    if name not in settings.rows:
        raise ValueError(f"experiment.vllm.rows has no settings for {name!r} (have {list(settings.rows)})")
    engines: dict[int, PeerEngine] = {}

    def run(requests, sampling: SamplingConfig, concurrency: int) -> dict:
        if any(r.arrival_s for r in requests):
            raise ValueError("vLLM's rows serve requests that all arrive at once (experiment.arrivals: null)")
        if concurrency not in engines:
            engines[concurrency] = PeerEngine(
                PEER, target_folder(cfg), int(settings.max_model_len), speculative_config(settings.rows[name]),
                cfg.target.get("dtype", "float32"), int(cfg.experiment.num_threads or 1), int(cfg.seed),
                settings.python, int(settings.kv_cache_gib), worker_env=proposer_env(settings, name),
                max_num_seqs=concurrency)
            atexit.register(engines[concurrency].close)
        engine = engines[concurrency]
        # no per-request seed: vLLM's seeded sampler fails on CPU above a few rows ("CPU Generator does not use
        # offset"); the engine's own seed (set at load) still fixes the run, and throughput needs no per-request law
        out = engine.generate([list(r.prompt) for r in requests], max(r.max_new_tokens for r in requests),
                              peer_sampling(sampling), None)
        tokens = [row[: r.max_new_tokens] for r, row in zip(requests, out.tokens)]
        return {"seconds": out.seconds, "tokens": tokens, "ttft": [], "latency": [], "tpot": [], "steps": None,
                "mean_batch": None}
    return run


def proposer_env(settings: DictConfig, name: str) -> dict:
    """A custom-class row's settings for our proposer inside vLLM (its hook passes the class only its VllmConfig)."""
    node = settings.rows[name]
    if node is None or node.get("method") != "custom_class" or "speculum" not in settings:
        return {}
    return {"SPECULUM_VLLM_PROPOSER": OmegaConf.to_yaml(settings.speculum)}


def runner(engine: PeerEngine, max_tokens: int, timed: Callable) -> Callable:
    # each call resets vLLM's prefix cache
    def run(prompt: torch.Tensor, sampling: SamplingConfig, policy=None, cell=None):
        if policy is not None:
            raise ValueError("vLLM's rows run its own schedule (no policy)")
        out = engine.generate(prompt_rows(prompt), max_tokens, peer_sampling(sampling),  # each row's own prompt
                              None if sampling.greedy else engine.seed)
        new = sum(len(row) for row in out.tokens)
        # its target forwards (per row, then per batched step): a prefill, then one per step, each keeping its
        # accepted drafts and one token
        forwards = round((new - out.counters.accepted) / max(len(out.tokens), 1))
        return timed(out.tokens, out.seconds, forwards, counters=out.counters, engine=PEER)
    return run
