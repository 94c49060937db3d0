"""Where a plain decoding token's time goes: ours, transformers' generate and vLLM's, on one model, one prompt, one
thread each (vLLM's worker pinned to one core), interleaved in one run.

    python -m experiments.peers.profile_plain                   # the zoo target, 256 tokens, 3 rounds
    python -m experiments.peers.profile_plain peer_profile.tokens=512

Ours is split by a torch.profiler pass over the same generation: the matrix products (the projections and the
LM head), attention, the other tensor operations (norms, rotary, residuals, cache writes), what no operation
accounts for (Python and dispatch inside the forward), and the loop outside the forward (laws, verification,
commit: the engine's own clocks). vLLM's figure is its engine's whole generate call: its kernels are its own.
Writes peer_profile.json and prints the table the README quotes.
"""

from __future__ import annotations

import statistics
import time

import hydra
import torch
from omegaconf import DictConfig
from torch.profiler import ProfilerActivity, profile

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from framework.lm.text import encode_prompt, tokenizer_of
from framework.zoo.checkpoints import load_causal_lm
from measurement.common import torch_threads, write_json
from measurement.peers.engine import PeerEngine, PeerMissing
from measurement.peers.rows import PEER, target_folder

MATMUL = {"aten::mm", "aten::addmm", "aten::bmm"}
ATTENTION = {"aten::_scaled_dot_product_flash_attention_for_cpu", "aten::_scaled_dot_product_attention_math"}
GREEDY = SamplingConfig(temperature=0)


def split_of_ours(target: HFTarget, prompt: torch.Tensor, tokens: int) -> dict:
    """Milliseconds per token of our plain decoding by where they go (one profiled generation)."""
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        start = time.perf_counter()
        out = generate(target, None, prompt, tokens, GREEDY)
        wall = time.perf_counter() - start
    summary = out.stats.summary()
    loop = summary["verify_s"] + summary["other_s"] + summary["draft_s"]
    forward = summary["target_s"] + summary["prefill_s"]
    by_kind = {"matmul": 0.0, "attention": 0.0, "other tensor ops": 0.0}
    for event in prof.key_averages():
        if not event.key.startswith("aten::"):
            continue
        kind = "matmul" if event.key in MATMUL else "attention" if event.key in ATTENTION else "other tensor ops"
        by_kind[kind] += event.self_cpu_time_total / 1e6
    ops = sum(by_kind.values())
    per_token = {k: 1000 * v / tokens for k, v in by_kind.items()}
    per_token["python and dispatch in the forward"] = 1000 * max(forward - ops, 0.0) / tokens
    per_token["loop outside the forward"] = 1000 * loop / tokens
    return {"per_token_ms": per_token, "profiled_wall_ms_per_token": 1000 * wall / tokens}


@hydra.main(config_path="../../conf", config_name="peer_profile", version_base="1.3")
def main(cfg: DictConfig) -> None:
    settings, tokens, rounds = cfg.experiment.vllm, int(cfg.peer_profile.tokens), int(cfg.peer_profile.rounds)
    with torch_threads(1):
        ours_model, hf_model = load_causal_lm(target_folder(cfg)), load_causal_lm(target_folder(cfg))
        target = HFTarget(ours_model)
        prompt = encode_prompt(cfg.peer_profile.prompt, tokenizer_of(ours_model))
        ids = prompt[0].tolist()
        runs = {"ours": lambda: generate(target, None, prompt, tokens, GREEDY),
                "transformers": lambda: hf_model.generate(prompt, attention_mask=torch.ones_like(prompt),
                                                          do_sample=False, max_new_tokens=tokens,
                                                          min_new_tokens=tokens)}
        engine = None
        try:
            engine = PeerEngine(PEER, target_folder(cfg), int(settings.max_model_len), None, python=settings.python,
                                kv_cache_gib=int(settings.kv_cache_gib))
            runs["vllm"] = lambda: engine.generate([ids], tokens, {"temperature": 0.0})
        except PeerMissing as missing:
            print(f"vLLM left out: {missing}")
        for run in runs.values():
            run()  # warm
        seconds = {name: [] for name in runs}
        for _ in range(rounds):  # interleaved: the machine's drift falls on every engine alike
            for name, run in runs.items():
                start = time.perf_counter()
                run()
                seconds[name].append(time.perf_counter() - start)
        result = {name: 1000 * statistics.median(s) / tokens for name, s in seconds.items()}
        split = split_of_ours(target, prompt, tokens)
        if engine is not None:
            engine.close()
    out = {"ms_per_token": result, "ours_split": split, "tokens": tokens, "rounds": rounds, "threads": 1,
           "prompt_tokens": len(ids), "vllm": engine.versions if engine is not None else None,
           "torch": torch.__version__}
    write_json(cfg.output_dir, "peer_profile.json", out)
    print(" | ".join(f"{name}: {ms:.2f} ms/token" for name, ms in result.items()))
    print("ours, per token: " + ", ".join(f"{k} {v:.2f} ms" for k, v in split["per_token_ms"].items()))


if __name__ == "__main__":
    main()
