"""The check EAGLE's authors ran by eye, with numbers: the first speculated token, sampled many
times at the run's sampling, against the target's own law.

    python -m experiments.first_token proposer=eagle2 experiment.samples=100000

The prompt's last token is taken as the root (Decoder.prefill(root=)), so the first verification
step emits the continuation of the whole prompt: its law must be the target's p(. | prompt)
exactly. Beside it, the draft's law of its first candidates: the law the root's children were
drawn from (iid/wor trees), else how often each token was a depth-1 candidate (point trees).
Prints the std of the per-token deviation (sampled - target) against the multinomial std
sqrt(p (1 - p) / N) (a ratio near 1 is sampling noise only) and a G-test; writes
first_token.png and first_token.json to the run folder.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from framework.core import files
from framework.core.host_memory import keep_large_tensors_on_heap
from framework.lm.text import encode_prompt, tokenizer_of
from measurement.common import one_process, without_grammar
from measurement.first_token_tables import first_tokens, plot, summarise


def run(cfg: DictConfig) -> dict:
    one_process("experiments.first_token")
    exp = cfg.experiment
    without_grammar(cfg, "experiments.first_token")
    if exp.num_threads is not None:
        torch.set_num_threads(exp.num_threads)
    keep_large_tensors_on_heap()  # [batch, nodes, V] laws every round: without it, page faults took 45% of the time
    model, factory, sampling = instantiate(cfg.target), instantiate(cfg.proposer), instantiate(cfg.sampling)
    prompt = encode_prompt(cfg.prompt, tokenizer_of(model))
    out = Path(cfg.output_dir)
    settings = {k: OmegaConf.to_container(cfg[k], resolve=True) if OmegaConf.is_config(cfg[k]) else cfg[k]
                for k in ("target", "proposer", "sampling", "prompt")}
    start = time.perf_counter()
    result = first_tokens(model, factory, prompt, sampling, exp.samples, exp.batch, cfg.seed, progress=True,
                          partial=out / "first_token.partial.json",  # resume: hydra.run.dir=<this folder>
                          settings=settings)
    stats = summarise(result["counts"], result["target"])
    name = cfg.proposer._target_.rsplit(".", 1)[-1] if cfg.proposer is not None else "plain"
    out.mkdir(parents=True, exist_ok=True)
    plot(result, exp.top, out / "first_token.png",
         f"{name}: first token, N={stats['samples']:,}; deviation std {stats['deviation_std']:.2e} "
         f"(multinomial {stats['multinomial_std']:.2e}); standardized {stats['standardized_std'] or float('nan'):.3f} "
         f"over {stats['standardized_tokens']} tokens; G-test p={stats['g_test_p']:.3f}")
    seconds = time.perf_counter() - start  # of this invocation (a resumed run counts its own part only)
    files.write_json(out / "first_token.json", {**stats, "proposer": name,
                                                "fanned_out": result["fanned"],  # None: no round left to run
                                                "seconds": round(seconds, 1)})
    return stats


@hydra.main(config_path="../conf", config_name="first_token", version_base="1.3")
def main(cfg: DictConfig) -> None:
    stats = run(cfg)
    print(json.dumps(stats, indent=2))
    print(f"written to {cfg.output_dir}")


if __name__ == "__main__":
    main()
