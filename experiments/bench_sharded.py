"""A tensor-parallel target beside one process, in one run: the same tokens, and the time per step.

    python -m experiments.bench_sharded                                  # zoo target + zoo draft, 2 processes, greedy
    python -m experiments.bench_sharded models=tiny processes=4 'overrides=[proposer=eagle3]'

Runs `experiments.run` (speculative and plain decoding, interleaved, median of `repeats`) three times with the
same settings: one process with `threads` threads, one process with `processes` x `threads` threads (the cores
the sharded run holds), and `torchrun --nproc-per-node processes ... target.tp_plan=auto`. Reports whether the
tokens match and the seconds per target forward of each (plain decoding: one forward per token). On a CPU the
sharded run is slower: every layer ends in an all-reduce through gloo; on GPUs (NCCL) tensor parallelism is
what makes a large target fit and run at all.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import hydra
from omegaconf import DictConfig

from measurement.common import write_json

ROOT = Path(__file__).resolve().parents[1]


def experiments_run(folder: Path, cfg: DictConfig, processes: int, threads: int) -> dict:
    """experiments.run's result.json for one placement."""
    settings = [f"models={cfg.models}", f"sampling={cfg.sampling}", f"max_new_tokens={cfg.max_new_tokens}",
                f"experiment.repeats={cfg.repeats}", f"experiment.warmup={cfg.warmup}",
                f"experiment.num_threads={threads}", f"hydra.run.dir={folder}", *cfg.overrides]
    if processes > 1:
        launch = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc-per-node={processes}"]
        settings.append("target.tp_plan=auto")
    else:
        launch = [sys.executable]
    env = {**os.environ, "OMP_NUM_THREADS": str(threads), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([*launch, "-m", "experiments.run", *settings], env=env, capture_output=True, text=True)
    if done.returncode:
        raise RuntimeError(f"experiments.run on {processes} process(es) failed:\n{done.stderr[-3000:]}")
    return json.loads((folder / "result.json").read_text())


def per_forward(result: dict, kind: str) -> float:
    """Seconds per target forward (the prefill counted as one) of the speculative or the plain run."""
    wall, stats = ((result["wall_s"], result["stats"]) if kind == "spec"
                   else (result["plain_wall_s"], result["plain_stats"]))
    return wall / (stats["steps"] + 1)


@hydra.main(config_path="../conf", config_name="bench_sharded", version_base="1.3")
def main(cfg: DictConfig) -> None:
    out = Path(cfg.output_dir)
    runs = {
        f"1 process, {cfg.threads} thread(s)": experiments_run(out / "one", cfg, 1, cfg.threads),
        f"1 process, {cfg.processes * cfg.threads} threads":
            experiments_run(out / "one_wide", cfg, 1, cfg.processes * cfg.threads),
        f"tp {cfg.processes} processes x {cfg.threads} thread(s)":
            experiments_run(out / "tp", cfg, cfg.processes, cfg.threads),
    }
    base = next(iter(runs.values()))
    same = {name: r["tokens"] == base["tokens"] and r["plain_tokens"] == base["plain_tokens"]
            for name, r in runs.items()}
    print("| placement | same tokens | plain s/forward | speculative s/forward | plain vs first row | speedup |")
    print("|---|---|---|---|---|---|")
    rows = []
    for name, r in runs.items():
        row = {"placement": name, "same_tokens": same[name], "plain_s_per_forward": per_forward(r, "plain"),
               "spec_s_per_forward": per_forward(r, "spec"), "speedup": r["speedup"],
               "plain_vs_one": per_forward(r, "plain") / per_forward(base, "plain")}
        rows.append(row)
        print(f"| {name} | {'yes' if row['same_tokens'] else 'NO'} | {row['plain_s_per_forward'] * 1e3:.1f} ms | "
              f"{row['spec_s_per_forward'] * 1e3:.1f} ms | {row['plain_vs_one']:.2f}x | {row['speedup']:.2f}x |")
    write_json(cfg.output_dir, "bench_sharded.json",
               {"settings": {k: cfg[k] for k in ("models", "sampling", "processes", "threads", "max_new_tokens")},
                "overrides": list(cfg.overrides), "rows": rows})
    if not all(same.values()):
        raise SystemExit(1)


if __name__ == "__main__":
    main()
