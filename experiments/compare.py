"""Every method on one target, one verifier, one prompt set: speed and a lossless check per cell.

    python -m experiments.compare                                  # every proposer config that runs on the zoo
    python -m experiments.compare experiment=compare_smoke         # 1 prompt per category, 16 tokens (minutes)
    python -m experiments.compare 'experiment.methods=[draft,prompt_lookup,hf_assisted]'
    python -m experiments.compare experiment.publish=<run folder>/compare.md   # docs/results.md and the README table
    python -m experiments.compare workload=spec_bench workload.suite.source=<question.jsonl> experiment.samples=48
    python -m experiments.compare -m 'experiment.methods=[proposer]' proposer=draft proposer.depth=2,4,6 \
        hydra/launcher=joblib && python -m experiments.compare experiment.merge=multirun/<date>/<time>
    python -m experiments.compare experiment=categories proposer=draft_tree # Spec-Bench style, one method, timing only
    python -m experiments.compare experiment=bench_hf    # beside transformers' generate, against its plain decoding

Methods: the proposer configs of conf/proposer (all of them that run on the target when
experiment.methods is null: the others are listed as skipped, with why), plus transformers' own
`hf_assisted` (assistant_model = the draft of proposer config experiment.assistant; a draft with another
tokenizer, e.g. experiment.assistant=cross_vocab, gets transformers' universal assisted generation) and
`hf_prompt_lookup` (its prompt lookup at its defaults), `hf_mtp` (its generate(use_mtp=True) on a target whose
folder carries MTP modules where transformers' class looks for them: DeepSeek-V3, GLM-4.5; skipped with why
elsewhere), and `proposer`: the run's own proposer
group with its command-line overrides (what a sweep over tree settings varies; a merged sweep names
each job's overrides); also `plain`, `hf_plain`, `hf_pld_matched`, `hf_early_exit` (its
assistant_early_exit at the exit our early_exit drafts from, or experiment.hf_exit_layer) and `arctic_suffix`
(arctic-inference's suffix cache drafting in our loop at our suffix config's settings; its environment:
python -m experiments.peers.setup arctic) when listed. Cells: method x policy x
sampling x category x batch size; the categories and prompts are the workload's (conf/workload, rendered for the
target: measurement.workload), a multi-turn prompt's later turns timed after the target's own answer. Every run
keeps per-row traces, from which each cell's metrics are computed by their definitions (framework.metrics:
both accepted lengths, per-position rates and their checks, latency percentiles; a speculation_profile.json per
cell). The presets in conf/experiment (compare_smoke, categories, bench_hf,
compare_batch) are settings of this run.

Batch sizes (experiment.batch_sizes): at B > 1 a timed run decodes B consecutive prompts of the category's
set (wrapping around; experiment.prompts likewise) as one batch, each prompt whole (rows of different lengths),
against the baseline on the same batch; transformers' runners decode
one prompt at a time, so they have rows at B = 1 only (the report says so). Policies (experiment.policies,
conf/policy; `fixed`: speculation as configured): one policy object per (method, policy, sampling, batch size),
learning over that cell's prompts; a policy sizes a proposer's speculation, so plain and transformers' rows run
under `fixed` only. Tokens per second count every row; tokens per forward are per row.

Per prompt and sampling, the baseline (experiment.baseline: our plain decoding, or transformers') runs once,
then every method still to run, in turn (the first rotating): a method's speedup is the baseline's time of
its own passes over its time, and its step cost one of its forwards in baseline forwards, so a rerun that
fills in missing cells is interleaved too. Each run is appended to
<run folder>/records.jsonl as it finishes: a rerun of the same command (the run folder is fixed,
see conf/compare.yaml) skips what is there, a failing run is recorded with its error and the
rest goes on. The lossless check per (method, sampling): the first speculated token after the
check prompt, sampled N times, G-test against the target's law (experiments.first_token), with
the total-variation error that N detects (shown on the fixed policy's rows, the method it ran); at greedy,
identity of every row with plain decoding's rows of the same batch instead.

The library is measurement/compare_*.py: the grid, the records, the timed cells, the tables, the outputs, the plots,
publishing and merging; this app wires them.
"""

from __future__ import annotations

import json
import os
import platform
from collections.abc import Iterable
from dataclasses import asdict
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf

from framework.core import files
from framework.lm.text import tokenizer_of
from measurement.common import job_record, one_process, torch_threads, write_json
from measurement.compare_cells import logits_of, lossless_checks, prime_policies, timed_cells, warm_up
from measurement.compare_grid import RUNNERS, Grid, device_profiles, grid_of, probe, runner_of
from measurement.compare_outputs import write_acceptance_records, write_outputs, write_profiles
from measurement.compare_publish import merge, publish
from measurement.compare_records import Records, record_key
from measurement.compare_report import FIXED, aggregate, markdown
from measurement.methods import HF_METHODS, build_methods, full_length_only
from measurement.throughput import curves
from measurement.workload import build_workload

ALL = "all"  # the summary rows' category: every category's runs together


def table(grid: Grid, categories: list[str], records: Iterable[dict], profiles: dict | None = None) -> list[dict]:
    """The rows of the cells that ran, in the grid's order (with device profiles: each row's predicted seconds)."""
    rows = aggregate(grid.methods, grid.samplings, categories, records, grid.every_policy, grid.batch_sizes, profiles)
    return [r for r in rows if grid.runs(r["method"], r["policy"], r["batch"])]


def notes(grid: Grid) -> list[str]:
    """What the axes leave out, said beside the summary."""
    said = []
    hf = [m for m in grid.methods if runner_of(m) in HF_METHODS]
    larger = [b for b in grid.batch_sizes if b > 1]
    if hf and larger:
        said.append(f"At batch sizes above 1 ({', '.join(map(str, larger))}): transformers' runners decode one "
                    f"prompt at a time, so their rows ({', '.join(hf)}) are at batch size 1 only.")
    unsized = [m for m in grid.methods if m not in grid.proposers]
    sizing = [p for p in grid.policies if p != FIXED]
    if unsized and sizing:
        said.append(f"Policies other than {FIXED} ({', '.join(sizing)}) size a proposer's speculation: the rows "
                    f"without one ({', '.join(unsized)}) run under {FIXED} only.")
    return said


def label(row: dict) -> str:
    """result.json's name of a summary row: method[/policy]/sampling[/batch=B] (fixed and B = 1 unnamed, as before)."""
    policy = [row["policy"]] if row["policy"] != FIXED else []
    batch = [f"batch={row['batch']}"] if row["batch"] != 1 else []
    return "/".join([row["method"], *policy, row["sampling"], *batch])


def run(cfg: DictConfig) -> dict:
    one_process("experiments.compare")
    full_length_only(cfg)
    with torch_threads(cfg.experiment.num_threads):
        return _run(cfg, grid_of(cfg))  # every name checked before any work


def _run(cfg: DictConfig, grid: Grid) -> dict:
    with files.exclusive(cfg.output_dir, "experiments.compare"):  # the folder is fixed: one run at a time in it
        return _run_in(cfg, grid, Path(cfg.output_dir))


def _run_in(cfg: DictConfig, grid: Grid, out: Path) -> dict:
    exp = cfg.experiment
    probe_model = instantiate(cfg.target)  # its own copy: the timed ones start fresh
    work = build_workload(cfg, tokenizer_of(probe_model), getattr(probe_model.config, "max_position_embeddings", None))
    grid.categories = list(work.units)
    probe(grid, probe_model, work.batch(grid.categories[0], 0, 1)[:, :8], listed=exp.methods is not None)
    del probe_model
    if exp.get("concurrency") is not None:
        return curves(cfg, grid, work, out, command(), hardware())
    runners, settings, model = build_methods(
        cfg, list(dict.fromkeys([RUNNERS[exp.baseline], *(runner_of(m) for m in grid.methods)])),
        {f"ours_{m}": node for m, node in grid.proposers.items()}, grid.pld)
    records = Records(out / "records.jsonl", record_key(cfg))
    warm_up(runners, work, grid, exp.warmup)
    prime_policies(runners, work, grid)
    timed_cells(grid, runners, work, records, exp.baseline, logits_of(model))
    lossless_checks(cfg, grid, model, records, out)
    profiles = device_profiles(exp)
    rows = table(grid, grid.categories, records.done.values(), profiles)
    summary = table(grid, [ALL], [{**r, "category": ALL} for r in records.done.values()], profiles)
    result = {"rows": rows, "summary": summary, "skipped": grid.skipped, "notes": notes(grid),
              "settings": settings, "baseline": exp.baseline, "workload": work.description, "hardware": hardware(),
              "samplings": {name: asdict(law) for name, law in grid.samplings.items()}, "command": command(),
              "config": OmegaConf.to_container(cfg, resolve=True)}
    files.write_text(out / "prompts.jsonl", "".join(
        json.dumps({"category": c, "prompt": i, "turn": t, "tokens": len(r.ids), "template": r.template,
                    "text": r.text}) + "\n"
        for (c, i, t, _), r in sorted(work.rendered.items(), key=lambda kv: (kv[0][:3], kv[1].text))))  # as rendered
    write_outputs(result, out)
    write_profiles(result, records.done.values(), out)
    write_acceptance_records(records.done.values(), out)
    one = [r for r in summary if r["speedup"] is not None]
    # result.json, as every job writes one: what experiments.sweep_merge tabulates and a sweeper's objective
    write_json(cfg.output_dir, "result.json", {**job_record(), "config": result["config"],
                                               "speedup": one[0]["speedup"] if len(one) == 1 else None,
                                               "summary": {label(r): r["speedup"] for r in one}})
    return result


def command() -> str | None:
    """The command line that made the run (None when called from Python)."""
    if not HydraConfig.initialized():
        return None
    return " ".join(["python -m experiments.compare", *HydraConfig.get().overrides.task])


def hardware() -> dict:
    """The machine a run's clock measured."""
    device = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"cpu": platform.processor() or platform.machine(), "cores": os.cpu_count(), "gpu": device,
            "python": platform.python_version(), "system": platform.platform(terse=True)}


@hydra.main(config_path="../conf", config_name="compare", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    if cfg.experiment.merge is not None:  # a finished -m sweep's folder: one table of its jobs, nothing run
        print(markdown(merge(Path(cfg.experiment.merge))))
        return
    if cfg.experiment.publish is not None:  # a finished run's compare.md: the results page and the README's table
        publish(Path(cfg.experiment.publish), page=cfg.experiment.publish_page, readme=cfg.experiment.publish_readme)
        return
    result = run(cfg)
    if cfg.experiment.get("concurrency") is not None:
        print((Path(cfg.output_dir) / "throughput.md").read_text())
        return None
    print((Path(cfg.output_dir) / "compare.md").read_text())
    timed = [r for r in result["summary"] if r["speedup"] is not None]
    return timed[0]["speedup"] if len(timed) == 1 else None  # one cell: the objective of hydra/sweeper=tune_draft


if __name__ == "__main__":
    main()
