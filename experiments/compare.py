"""Every method on one target, one verifier, one prompt set: speed and a lossless check per cell.

    python -m experiments.compare                                  # every proposer config that runs on the zoo
    python -m experiments.compare experiment=compare_smoke         # 1 prompt per category, 16 tokens (minutes)
    python -m experiments.compare 'experiment.methods=[draft,prompt_lookup,hf_assisted]'
    python -m experiments.compare experiment.publish=<run folder>/compare.md   # docs/results.md and the README table
    python -m experiments.compare -m 'experiment.methods=[proposer]' proposer=draft proposer.gamma=2,4,6 \
        hydra/launcher=joblib && python -m experiments.compare experiment.merge=multirun/<date>/<time>
    python -m experiments.compare experiment=categories proposer=draft_tree   # Spec-Bench style, one method, timing only
    python -m experiments.compare experiment=bench_hf    # beside transformers' generate, against its plain decoding

Methods: the proposer configs of conf/proposer (all of them that run on the target when
experiment.methods is null: the others are listed as skipped, with why), plus transformers' own
`hf_assisted` (assistant_model = the draft of proposer config experiment.assistant) and
`hf_prompt_lookup` (its prompt lookup at its defaults), and `proposer`: the run's own proposer
group with its command-line overrides (what a sweep over tree settings varies; a merged sweep names
each job's overrides); also `plain`, `hf_plain` and `hf_pld_matched` when listed. Cells: method x sampling
x category. The presets in conf/experiment (compare_smoke, categories, bench_hf) are settings of this run.

Per prompt and sampling, the baseline (experiment.baseline: our plain decoding, or transformers') runs once,
then every method still to run, in turn (the first rotating): a method's speedup is the baseline's time of
its own passes over its time, and its step cost one of its forwards in baseline forwards, so a rerun that fills in missing cells is interleaved too. Each run is appended to
<run folder>/records.jsonl as it finishes: a rerun of the same command (the run folder is fixed,
see conf/compare.yaml) skips what is there, a failing run is recorded with its error and the
rest goes on. The lossless check per (method, sampling): the first speculated token after the
check prompt, sampled N times, G-test against the target's law (experiments.first_token), with
the total-variation error that N detects; at greedy, identity with plain decoding instead.
"""

from __future__ import annotations

import json
import traceback
from dataclasses import dataclass
from pathlib import Path

import hydra
import torch
from hydra.utils import instantiate
from omegaconf import DictConfig, OmegaConf
from tqdm.auto import tqdm

from experiments.common import CONF, job_record, option, torch_threads, verifier_of, write_json
from experiments.compare_report import aggregate, markdown, merge, publish, write_outputs
from experiments.first_tokens import first_tokens, plot, summarise
from experiments.methods import HF_PLD_DEFAULTS, build_methods, full_length_only, hf_sampling
from framework.core import files
from framework.core.sampling import SamplingConfig
from framework.engine import generate
from framework.lm.target import HFTarget
from framework.lm.text import encode_prompt, tokenizer_of
from framework.zoo.prompts import CATEGORIES, stdlib_prompt_sets

# Rows that are not a conf/proposer config -> their runner (experiments.methods): plain decoding of ours and
# of transformers, transformers' assisted generation and its prompt lookup (at its defaults; matched: at our
# prompt lookup's settings). By default a run takes the two speculative ones.
RUNNERS = {"plain": "ours_plain", "hf_plain": "hf_plain", "hf_assisted": "hf_assisted", "hf_prompt_lookup": "hf_pld",
           "hf_pld_matched": "hf_pld_matched"}
DISCOVERED = ("hf_assisted", "hf_prompt_lookup")
BASELINES = ("plain", "hf_plain")  # experiment.baseline: the per-prompt reference of every speedup
OWN = "proposer"  # the method that is the run's own proposer group (e.g. -m proposer.gamma=2,4)
ALL = "all"  # the summary rows' category: every category's runs together
CUSTOM = "prompts"  # the one category of experiment.prompts (token ids, for targets without a tokenizer)


def proposer_configs() -> list[str]:
    return sorted(p.stem for p in (CONF / "proposer").glob("*.yaml") if p.stem != "none")


def sampling_configs() -> list[str]:
    return sorted(p.stem for p in (CONF / "sampling").glob("*.yaml"))


@dataclass
class Plan:
    methods: list[str]  # row names: proposer config names and RUNNERS keys
    proposers: dict[str, DictConfig]  # proposer config name -> its node
    samplings: dict[str, SamplingConfig]
    categories: list[str]
    skipped: dict[str, str]  # discovered proposer configs that do not run on the target -> why
    pld: dict[str, dict]  # transformers' prompt-lookup rows -> their num_tokens / max_ngram


def plan(cfg: DictConfig) -> Plan:
    """Every name checked before any work: unknown names fail, listing the valid ones."""
    exp = cfg.experiment
    known = proposer_configs()
    listed = exp.methods is not None
    methods = list(exp.methods) if listed else known + list(DISCOVERED)
    wrong = [m for m in methods if m not in known and m not in RUNNERS and m != OWN]
    if wrong:
        raise ValueError(f"unknown methods {wrong} in experiment.methods (have {known + list(RUNNERS)} and {OWN!r})")
    if exp.baseline not in BASELINES:
        raise ValueError(f"experiment.baseline must be one of {list(BASELINES)}, got {exp.baseline!r}")
    if OWN in methods and cfg.proposer is None:
        raise ValueError(f"experiment.methods: {OWN!r} is the run's own proposer group, but proposer=none")
    categories = [CUSTOM] if exp.prompts is not None else list(exp.categories)
    wrong = [c for c in categories if c not in (*CATEGORIES, CUSTOM)]
    if wrong:
        raise ValueError(f"unknown categories {wrong} in experiment.categories (have {list(CATEGORIES)})")
    wrong = [s for s in exp.samplings if s not in sampling_configs()]
    if wrong:
        raise ValueError(f"unknown samplings {wrong} in experiment.samplings (have {sampling_configs()})")
    samplings = {s: instantiate(option("sampling", s, cfg, "experiment.samplings")) for s in exp.samplings}
    if RUNNERS[exp.baseline].startswith("hf_"):  # every speedup needs it: refused here, before any work (a
        for law in samplings.values():         # method's row that cannot run a sampling is recorded with its error)
            hf_sampling(law)
    proposers = {m: option("proposer", m, cfg, "experiment.methods") for m in methods if m in known}
    if OWN in methods:  # the composed group, command-line overrides included: what a sweep varies
        proposers[OWN] = cfg.proposer
    return Plan(methods, proposers, samplings, categories, {}, pld_variants(cfg, methods))


def probe(plan: Plan, model, prompt: torch.Tensor, listed: bool) -> None:
    """Drops (discovered) or refuses (listed) proposer configs that cannot be built for this target
    or cannot decode on it: two tokens each, before any timing."""
    target = HFTarget(model)
    for name, node in list(plan.proposers.items()):
        try:
            generate(target, instantiate(node)(), prompt, 2, SamplingConfig(temperature=0))
        except Exception as error:  # noqa: BLE001 - any failure means "does not run here"
            if listed:
                raise ValueError(f"experiment.methods: {name} does not run on this target: {error}") from error
            plan.skipped[name] = f"{type(error).__name__}: {error}"
            del plan.proposers[name]
            plan.methods.remove(name)


def fingerprint(cfg: DictConfig) -> str:
    """What a stored record must share with this run to be reused."""
    exp = cfg.experiment
    return json.dumps({"target": OmegaConf.to_container(cfg.target, resolve=True), "seed": cfg.seed,
                       "max_new_tokens": exp.max_new_tokens, "threads": exp.num_threads, "baseline": exp.baseline,
                       "prompts": OmegaConf.to_container(exp.prompts) if exp.prompts is not None else None,
                       "verifier": OmegaConf.to_container(cfg.verifier, resolve=True) if cfg.get("verifier") else None,
                       # the run's own proposer group is one row name whatever its settings: its records are its settings'
                       "own": OmegaConf.to_container(cfg.proposer, resolve=True) if OWN in (exp.methods or []) else None},
                      sort_keys=True)  # a token-id workload is not named by its category and index


class Records:
    """records.jsonl: one line per finished run or check, appended at once (nothing computed is lost; a line
    cut off by a kill is dropped on the next read, and its run made again)."""

    def __init__(self, path: Path, key: str):
        self.path, self.key = path, key
        self.done = {record["id"]: record for record in files.read_json_lines(path) if record.get("key") == key}

    def add(self, record: dict) -> None:
        record = {**record, "key": self.key}
        self.done[record["id"]] = record
        files.append_line(self.path, json.dumps(record))


def run_id(method: str, sampling: str, category: str, index: int) -> str:
    return f"run/{method}/{sampling}/{category}/{index}"


def attempt(runner, prompt, law) -> dict:
    try:
        new, seconds, forwards, stats = runner(prompt, law)
    except Exception as error:  # noqa: BLE001 - recorded, the rest goes on
        return {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc(limit=3)}
    out = {"tokens": new, "new_tokens": len(new), "seconds": seconds, "forwards": forwards}
    if stats is not None:
        summary = stats.summary()
        out.update(steps=stats.target_forwards, accepted=stats.accepted_total,
                   split={k: summary[k] for k in ("draft_s", "target_s", "verify_s", "other_s")},
                   accepted_counts=torch.cat([s.accepted.flatten() for s in stats.steps]).tolist() if stats.steps else [])
    return out


def timed_cells(plan: Plan, runners: dict, prompts: dict, records: Records, baseline: str) -> None:
    groups = [(c, s, i) for c in plan.categories for s in plan.samplings for i in range(len(prompts[c]))]
    turn = 0
    for category, sampling, index in tqdm(groups, desc="compare", unit="prompt"):
        missing = [m for m in plan.methods if run_id(m, sampling, category, index) not in records.done]
        if not missing:
            continue
        prompt, law = prompts[category][index], plan.samplings[sampling]
        plain = attempt(runners[RUNNERS[baseline]], prompt, law)
        records.add({"id": f"plain/{sampling}/{category}/{index}/{turn}", "method": "plain", "sampling": sampling,
                     "category": category, "prompt": index, **plain})
        order = missing[turn % len(missing):] + missing[: turn % len(missing)]
        turn += 1
        for method in order:
            out = attempt(runners[RUNNERS.get(method, f"ours_{method}")], prompt, law)
            if "error" not in out and "error" not in plain:
                out["plain_seconds"], out["plain_forwards"] = plain["seconds"], plain["forwards"]
                out["same_as_plain"] = out["tokens"] == plain["tokens"] if law.greedy else None
            elif "error" in plain:
                out.setdefault("error", f"plain decoding failed: {plain['error']}")
            records.add({"id": run_id(method, sampling, category, index), "method": method, "sampling": sampling,
                         "category": category, "prompt": index, **{k: v for k, v in out.items() if k != "tokens"}})


def lossless_checks(cfg: DictConfig, plan: Plan, model, records: Records, out: Path) -> None:
    """G-test of the first speculated token per (method, sampling), ours only; a plot of each."""
    check = cfg.experiment.check
    if not check.samples:  # a preset that times only (experiment=categories, bench_hf)
        return
    prompt = encode_prompt(cfg.prompt, tokenizer_of(model))
    checked = cfg.prompt if isinstance(cfg.prompt, str) else list(cfg.prompt)  # text or token ids
    for method in plan.proposers:
        for sampling, law in plan.samplings.items():
            rid = f"check/{method}/{sampling}/{check.samples}/{json.dumps(checked)}"  # its N and prompt
            if rid in records.done or law.greedy:  # greedy: identity with plain decoding is the check
                continue
            try:
                result = first_tokens(model, instantiate(plan.proposers[method]), prompt, law, check.samples, check.batch, cfg.seed,
                                      verifier_of(cfg))
                stats = summarise(result["counts"], result["target"])
                plot(result, check.top, out / f"first_token_{method}_{sampling}.png",
                     f"{method} ({sampling}): first token, N={stats['samples']:,}; G-test p={stats['g_test_p']:.3f}")
                record = {"samples": stats["samples"], "detectable_tv": stats["detectable_tv"],
                          "g_test_p": stats["g_test_p"], "passes": stats["g_test_passes"]}
            except Exception as error:  # noqa: BLE001
                record = {"error": f"{type(error).__name__}: {error}"}
            records.add({"id": rid, "method": method, "sampling": sampling, **record})


def workload(cfg: DictConfig, plan: Plan, tokenizer) -> dict[str, list[torch.Tensor]]:
    """category -> prompts [1, L]: the first per_category of each set, or experiment.prompts as token ids."""
    exp = cfg.experiment
    if exp.prompts is not None:
        return {CUSTOM: [encode_prompt(list(p), tokenizer) for p in exp.prompts]}
    if tokenizer is None:
        raise ValueError("the prompt sets are text: the target needs a tokenizer beside its checkpoint "
                         "(e.g. models=zoo), or give experiment.prompts as token ids")
    sets = stdlib_prompt_sets()
    return {c: [encode_prompt(t, tokenizer) for t in sets[c]["prompt"][: exp.per_category]] for c in plan.categories}


def warm_up(runners: dict, prompts: dict, samplings: dict, rounds: int) -> None:
    """Untimed rounds of every runner on the first prompt (the first call of a model pays for its
    allocations; transformers' first generate for its setup)."""
    prompt = next(iter(prompts.values()))[0]
    for _ in range(rounds):
        for law in samplings.values():
            for runner in runners.values():
                attempt(runner, prompt, law)


def run(cfg: DictConfig) -> dict:
    full_length_only(cfg)
    with torch_threads(cfg.experiment.num_threads):
        return _run(cfg, plan(cfg))  # every name checked before any work


def _run(cfg: DictConfig, the_plan: Plan) -> dict:
    with files.exclusive(cfg.output_dir, "experiments.compare"):  # the folder is fixed: one run at a time in it
        return _run_in(cfg, the_plan, Path(cfg.output_dir))


def _run_in(cfg: DictConfig, the_plan: Plan, out: Path) -> dict:
    exp = cfg.experiment
    probe_model = instantiate(cfg.target)  # its own copy: the timed ones start fresh
    prompts = workload(cfg, the_plan, tokenizer_of(probe_model))
    probe(the_plan, probe_model, next(iter(prompts.values()))[0][:, :8], listed=exp.methods is not None)
    del probe_model
    runners, settings, model = build_methods(
        cfg, list(dict.fromkeys([RUNNERS[exp.baseline], *(RUNNERS.get(m, f"ours_{m}") for m in the_plan.methods)])),
        {f"ours_{m}": node for m, node in the_plan.proposers.items()}, the_plan.pld)
    records = Records(out / "records.jsonl", fingerprint(cfg))
    warm_up(runners, prompts, the_plan.samplings, exp.warmup)
    timed_cells(the_plan, runners, prompts, records, exp.baseline)
    lossless_checks(cfg, the_plan, model, records, out)
    rows = aggregate(the_plan.methods, the_plan.samplings, the_plan.categories, records.done.values())
    summary = aggregate(the_plan.methods, the_plan.samplings, [ALL], [{**r, "category": ALL} for r in records.done.values()])
    result = {"rows": rows, "summary": summary, "skipped": the_plan.skipped, "settings": settings,
              "baseline": exp.baseline, "config": OmegaConf.to_container(cfg, resolve=True)}
    write_outputs(result, out)
    one = [r for r in summary if r["speedup"] is not None]
    # result.json, as every job writes one: what experiments.sweep_merge tabulates and a sweeper's objective
    write_json(cfg.output_dir, "result.json", {**job_record(), "config": result["config"],
                                               "speedup": one[0]["speedup"] if len(one) == 1 else None,
                                               "summary": {f"{r['method']}/{r['sampling']}": r["speedup"] for r in one}})
    return result


def pld_variants(cfg: DictConfig, methods: list[str]) -> dict:
    """transformers' prompt lookup at its defaults, and (when hf_pld_matched runs) matched to the settings of
    our prompt-lookup config experiment.pld_matched."""
    variants = {"hf_pld": dict(HF_PLD_DEFAULTS)}
    if "hf_pld_matched" in methods:
        matched = option("proposer", cfg.experiment.pld_matched, cfg, "experiment.pld_matched")
        if "num_tokens" not in matched or "max_ngram" not in matched:
            raise ValueError(f"experiment.pld_matched={cfg.experiment.pld_matched!r} is not a prompt lookup config "
                             "(it needs num_tokens and max_ngram)")
        variants["hf_pld_matched"] = {"num_tokens": int(matched.num_tokens), "max_ngram": int(matched.max_ngram)}
    return variants


@hydra.main(config_path="../conf", config_name="compare", version_base="1.3")
def main(cfg: DictConfig) -> float | None:
    if cfg.experiment.merge is not None:  # a finished -m sweep's folder: one table of its jobs, nothing run
        print(markdown(merge(Path(cfg.experiment.merge))))
        return
    if cfg.experiment.publish is not None:  # a finished run's compare.md: the results page and the README's table
        publish(Path(cfg.experiment.publish))
        return
    result = run(cfg)
    print((Path(cfg.output_dir) / "compare.md").read_text())
    timed = [r for r in result["summary"] if r["speedup"] is not None]
    return timed[0]["speedup"] if len(timed) == 1 else None  # one cell: the objective of hydra/sweeper=tune_draft


if __name__ == "__main__":
    main()
