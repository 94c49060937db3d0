"""Throughput against concurrency: every method serving the same requests through continuous batching.

`python -m experiments.compare experiment.concurrency=[1,2,4,8,16,32]` runs this instead of the per-prompt cells:
per sampling and concurrency c, each method decodes every request of the workload (all arriving at once, or as
experiment.arrivals says) with at most c decoding together; output tokens per second over the whole run, and per
request TTFT, TPOT and end-to-end latency (p50, p95). Ours go through engine/scheduler.py (plain decoding, and
each proposer under each policy); beside them transformers' batched `generate` (static batches of c prompts, left
padded) and its continuous-batching manager (`generate_batch`, at most c requests per batch), and vLLM's rows
(experiment.vllm.rows, its max_num_seqs = c; where `python -m experiments.peers.setup vllm` built it). Methods run
in turn per (sampling, c), so a noisy machine slows them alike. At greedy every request's tokens are checked against
plain decoding's. Writes throughput.json, throughput.md and a plot per sampling (tokens per second and speedup
against concurrency).

A library of experiments.compare; not an entry point.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from transformers import GenerationConfig
from transformers.generation.configuration_utils import ContinuousBatchingConfig

from engine.scheduler import AllAtOnce, Request, Scheduler
from framework.core import files
from framework.core.sampling import SamplingConfig, hf_sampling
from measurement.common import write_json
from measurement.peers.rows import ROWS as VLLM_ROWS
from measurement.peers.rows import serving_runner

log = logging.getLogger(__name__)
HF_BATCHED, HF_CONTINUOUS = "hf_batched", "hf_continuous"
THROUGHPUT_ROWS = (HF_BATCHED, HF_CONTINUOUS, *VLLM_ROWS)  # vLLM's: where its environment is built


def concurrencies(exp: DictConfig) -> list[int]:
    levels = list(exp.concurrency)
    if not levels or any(isinstance(c, bool) or not isinstance(c, int) or c < 1 for c in levels) \
            or len(set(levels)) != len(levels):
        raise ValueError(f"experiment.concurrency must list distinct integers >= 1, got {levels}")
    rounds = exp.get("rounds", 1)
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds < 1:
        raise ValueError(f"experiment.rounds must be an integer >= 1, got {rounds!r}")
    return levels


def requests_of(work, exp: DictConfig, arrivals) -> list[Request]:
    """Every timed prompt of the workload (its categories in turn), each a request of max_new_tokens."""
    prompts = [work.ids(category, index)[0].tolist() for category, units in work.units.items()
               for index in range(units)]
    times = arrivals.times(len(prompts))
    return [Request(prompt, exp.max_new_tokens, at, i) for i, (prompt, at) in enumerate(zip(prompts, times))]


def ours(model, proposer: DictConfig | None, make_policy: Callable | None, cfg: DictConfig):
    """A pass builds its proposer factory afresh: what one keeps across requests (a suffix cache of their outputs)
    holds the pass's own requests only, never an earlier pass's answers to the same prompts."""
    def run(requests: list[Request], sampling: SamplingConfig, concurrency: int) -> dict:
        runner = Scheduler(model, instantiate(proposer) if proposer is not None else None, sampling, concurrency,
                           seed=cfg.seed, policy=make_policy() if make_policy else None)
        start = time.perf_counter()
        done = runner.run([Request(r.prompt, r.max_new_tokens, r.arrival_s, r.id) for r in requests])
        seconds = time.perf_counter() - start
        batch = [s.decoding for s in runner.steps]
        return {"seconds": seconds, "tokens": [f.tokens for f in done], "ttft": [f.ttft_s for f in done],
                "latency": [f.latency_s for f in done], "tpot": [f.tpot_s for f in done if f.tpot_s is not None],
                "steps": len(runner.steps), "mean_batch": sum(batch) / len(batch) if batch else 0.0}
    return run


def hf_batched(model, cfg: DictConfig):
    """transformers' generate on static batches of `concurrency` requests in arrival order, left padded."""
    pad = model.generation_config.pad_token_id if model.generation_config.pad_token_id is not None else 0

    def run(requests: list[Request], sampling: SamplingConfig, concurrency: int) -> dict:
        torch.manual_seed(cfg.seed)
        tokens, latency = [], []
        start = time.perf_counter()
        for first in range(0, len(requests), concurrency):
            group = requests[first:first + concurrency]
            width = max(len(r.prompt) for r in group)
            ids = torch.tensor([[pad] * (width - len(r.prompt)) + list(r.prompt) for r in group])
            mask = torch.tensor([[0] * (width - len(r.prompt)) + [1] * len(r.prompt) for r in group])
            budget = max(r.max_new_tokens for r in group)
            out = model.generate(ids, attention_mask=mask, max_new_tokens=budget, min_new_tokens=budget,
                                 eos_token_id=None, pad_token_id=pad, **hf_sampling(sampling))
            rows = out[:, width:].tolist()
            ended = time.perf_counter() - start
            for r, row in zip(group, rows):
                tokens.append(row[: r.max_new_tokens])
                latency.append(ended - r.arrival_s)
        return {"seconds": time.perf_counter() - start, "tokens": tokens, "ttft": [], "latency": latency, "tpot": [],
                "steps": None, "mean_batch": None}
    return run


def hf_continuous(model, cfg: DictConfig):
    """transformers' continuous-batching manager (generate_batch), at most `concurrency` requests per batch, its
    paged cache sized for the run (no CUDA graphs, no compile: as our rows run)."""
    def run(requests: list[Request], sampling: SamplingConfig, concurrency: int) -> dict:
        torch.manual_seed(cfg.seed)
        budget = max(r.max_new_tokens for r in requests)
        longest = max(len(r.prompt) for r in requests) + budget
        block = 32
        settings = ContinuousBatchingConfig(
            max_requests_per_batch=concurrency, block_size=block, num_blocks=concurrency * (-(-longest // block) + 1),
            max_batch_tokens=max(concurrency, 256), use_cuda_graph=False, use_async_batching=False,
            default_compile_level=0)
        config = GenerationConfig(max_new_tokens=budget, eos_token_id=-1, pad_token_id=0, **hf_sampling(sampling))
        start = time.perf_counter()
        out = model.generate_batch([list(r.prompt) for r in requests], config, continuous_batching_config=settings,
                                   warmup=False)
        seconds = time.perf_counter() - start
        done = [out[key] for key in sorted(out, key=lambda k: int(k.rsplit("_", 1)[-1]))]
        return {"seconds": seconds, "tokens": [list(d.generated_tokens) for d in done], "ttft": [], "latency": [],
                "tpot": [], "steps": None, "mean_batch": None}
    return run


def one_pass(run: Callable, requests: list[Request], sampling: SamplingConfig, concurrency: int,
            failed: dict[tuple[str, int], str], name: str) -> dict | None:
    """One pass of a runner, or None with its error kept in `failed` (that runner skips the level from then on)."""
    if (name, concurrency) in failed:
        return None
    try:
        return run(requests, sampling, concurrency)
    except Exception as error:  # one engine's failure (a peer's crash) must not lose every other row of the run
        failed[(name, concurrency)] = f"{type(error).__name__}: {error}"
        log.exception("%s at c=%d failed", name, concurrency)
        return None


def percentile(values: list[float], q: float) -> float | None:
    values = sorted(v for v in values if v is not None)
    if not values:
        return None
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def curves(cfg: DictConfig, grid, work, out: Path, command: str | None = None, hardware: dict | None = None) -> dict:
    """Every (sampling, concurrency, method[/policy]) of the grid; throughput.json/.md and the plots in `out`."""
    exp = cfg.experiment
    levels, rounds = concurrencies(exp), exp.get("rounds", 1)
    arrivals = instantiate(exp.arrivals) if exp.get("arrivals") is not None else AllAtOnce()
    requests = requests_of(work, exp, arrivals)
    ours_model, hf_model = instantiate(cfg.target), instantiate(cfg.target)  # ours runs speculum_tree attention
    runners: dict[str, Callable] = {}
    for method in grid.methods:
        if method == HF_BATCHED:
            runners[method] = hf_batched(hf_model, cfg)
        elif method == HF_CONTINUOUS:
            runners[method] = hf_continuous(hf_model, cfg)
        elif method in VLLM_ROWS:
            runners[method] = serving_runner(cfg, method)
        else:
            node = grid.proposers.get(method)
            for policy in grid.every_policy:
                if grid.runs(method, policy, 1):  # plain decoding has nothing to size: fixed, listed or not
                    name = method if policy == "fixed" else f"{method}/{policy}"
                    runners[name] = ours(ours_model, node, grid.policies.get(policy), cfg)
    # untimed, each runner at each concurrency: a short pass of as many requests (first calls build caches, a policy
    # measures its costs at that batch size, vLLM loads its engine for that max_num_seqs)
    failed: dict[tuple[str, int], str] = {}  # (runner, c) -> its error: that row reports it, the run goes on
    for name, run in runners.items():
        for c in levels:
            one_pass(run, [Request(r.prompt, 2, 0.0, r.id) for r in requests[:c]], SamplingConfig(temperature=0), c,
                    failed, name)
    rows = []
    for sampling_name, sampling in grid.samplings.items():
        for c in levels:
            passes: dict[str, list[dict]] = {name: [] for name in runners}
            for round_ in range(rounds):  # methods in turn, the order reversed every other round: drift hits all alike
                for name in (list(runners) if round_ % 2 == 0 else list(runners)[::-1]):
                    got = one_pass(runners[name], requests, sampling, c, failed, name)
                    if got is not None:
                        passes[name].append(got)
            plain = None
            for name in runners:
                if (name, c) in failed:
                    rows.append({"sampling": sampling_name, "concurrency": c, "method": name,
                                 "requests": len(requests), "error": failed[(name, c)]})
                    continue
                got = sorted(passes[name], key=lambda g: g["seconds"])[(rounds - 1) // 2]  # the median pass
                total = sum(len(t) for t in got["tokens"])
                row = {"sampling": sampling_name, "concurrency": c, "method": name, "requests": len(requests),
                       "tokens": total, "seconds": got["seconds"], "tokens_per_s": total / got["seconds"],
                       "latency_p50_s": percentile(got["latency"], 0.5),
                       "latency_p95_s": percentile(got["latency"], 0.95),
                       "ttft_p50_s": percentile(got["ttft"], 0.5), "tpot_p50_s": percentile(got["tpot"], 0.5),
                       "steps": got["steps"], "mean_batch": got["mean_batch"]}
                if name == "plain":
                    plain = got
                if sampling.greedy and plain is not None:
                    row["identical"] = got["tokens"] == plain["tokens"]
                rows.append(row)
                log.info("%s c=%d %s: %.1f tokens/s", sampling_name, c, name, row["tokens_per_s"])
            base = next((r for r in rows if r["sampling"] == sampling_name and r["concurrency"] == c
                         and r["method"] == "plain" and "error" not in r), None)
            for r in rows:
                if r["sampling"] == sampling_name and r["concurrency"] == c and "error" not in r:
                    r["speedup"] = r["tokens_per_s"] / base["tokens_per_s"] if base else None
    result = {"rows": rows, "concurrency": levels, "requests": len(requests), "max_new_tokens": exp.max_new_tokens,
              "arrivals": OmegaConf.to_container(exp.arrivals, resolve=True) if exp.get("arrivals") else "all_at_once",
              "workload": work.description, "threads": exp.num_threads, "command": command, "hardware": hardware,
              "config": OmegaConf.to_container(cfg, resolve=True)}
    write_json(out, "throughput.json", result)
    files.write_text(out / "throughput.md", markdown(result))
    plots(result, out)
    return result


def markdown(result: dict) -> str:
    lines = [f"# Throughput against concurrency ({result['requests']} requests of {result['max_new_tokens']} tokens, "
             f"arrivals {result['arrivals']}, {result['threads']} thread(s))", "",
             f"Command: `{result['command'] or '(called from Python)'}`; hardware: {result['hardware']}.", "",
             "Tokens per second over the whole run (its ratio to plain decoding at the same concurrency); each method "
             "decodes every request, at most c together.", ""]
    for sampling in dict.fromkeys(r["sampling"] for r in result["rows"]):
        rows = [r for r in result["rows"] if r["sampling"] == sampling]
        lines += [f"## {sampling}", "", "| method | " + " | ".join(f"c={c}" for c in result["concurrency"]) + " |",
                  "|---|" + "---|" * len(result["concurrency"])]
        for method in dict.fromkeys(r["method"] for r in rows):
            cells = []
            for c in result["concurrency"]:
                r = next((r for r in rows if r["method"] == method and r["concurrency"] == c), None)
                if r is None:
                    cells.append("")
                    continue
                if "error" in r:
                    cells.append(f"error: {r['error'][:80]}")
                    continue
                mark = "" if r.get("identical", True) else " (tokens differ!)"
                speed = f" ({r['speedup']:.2f}x)" if r.get("speedup") is not None else ""
                cells.append(f"{r['tokens_per_s']:.1f} tok/s{speed}{mark}")
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        lines += ["", "Latency p50 / p95 (s), ours with TTFT p50:", "",
                  "| method | " + " | ".join(f"c={c}" for c in result["concurrency"]) + " |",
                  "|---|" + "---|" * len(result["concurrency"])]
        for method in dict.fromkeys(r["method"] for r in rows):
            cells = []
            for c in result["concurrency"]:
                r = next((r for r in rows if r["method"] == method and r["concurrency"] == c), None)
                if r is None or r.get("latency_p50_s") is None:
                    cells.append("")
                    continue
                ttft = f", TTFT {r['ttft_p50_s']:.2f}" if r["ttft_p50_s"] is not None else ""
                cells.append(f"{r['latency_p50_s']:.2f} / {r['latency_p95_s']:.2f}{ttft}")
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        lines.append("")
    return "\n".join(lines)


def plots(result: dict, out: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    name = result["workload"].get("suite", "workload") if isinstance(result["workload"], dict) else "workload"
    for sampling in dict.fromkeys(r["sampling"] for r in result["rows"]):
        rows = [r for r in result["rows"] if r["sampling"] == sampling]
        fig, (tps, ratio) = plt.subplots(1, 2, figsize=(13, 4.5))
        methods = list(dict.fromkeys(r["method"] for r in rows))
        bases = list(dict.fromkeys(m.split("/")[0] for m in methods))  # a colour per method, a line style per policy
        policies = list(dict.fromkeys(m.split("/", 1)[1] for m in methods if "/" in m))
        for method in methods:
            mine = sorted((r for r in rows if r["method"] == method and "error" not in r),
                          key=lambda r: r["concurrency"])
            xs = [r["concurrency"] for r in mine]
            base, _, policy = method.partition("/")
            look = {"color": plt.cm.tab20(bases.index(base) % 20), "marker": "o", "label": method,
                    "linestyle": ["-", "--", ":", "-."][(policies.index(policy) + 1) % 4 if policy else 0]}
            tps.plot(xs, [r["tokens_per_s"] for r in mine], **look)
            ratio.plot(xs, [r["speedup"] for r in mine], **look)
        for axis, what in ((tps, "output tokens per second"), (ratio, "throughput / plain decoding's")):
            axis.set_xscale("log", base=2)
            axis.set_xlabel("concurrency (requests decoding together, at most)")
            axis.set_ylabel(what)
        ratio.axhline(1.0, color="grey", linewidth=0.8)
        ratio.legend(fontsize=7, loc="center left", bbox_to_anchor=(1.02, 0.5))
        fig.suptitle(f"{name}, {sampling}: throughput against concurrency")
        fig.tight_layout()
        files.save_figure(fig, out / f"throughput_{sampling}.png", dpi=110)
        plt.close(fig)
