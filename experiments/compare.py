"""Every method on one target, one verifier, one prompt set: speed and a lossless check per cell.

    python -m experiments.compare                                  # every proposer config that runs on the zoo
    python -m experiments.compare experiment=compare_smoke         # 1 prompt per category, 16 tokens (minutes)
    python -m experiments.compare 'experiment.methods=[draft,prompt_lookup,hf_assisted]'
    python -m experiments.compare experiment.publish=<run folder>/compare.md   # docs/results.md and the README table
    python -m experiments.compare -m 'experiment.methods=[proposer]' proposer=draft proposer.gamma=2,4,6 \
        hydra/launcher=joblib && python -m experiments.compare experiment.merge=multirun/<date>/<time>

Methods: the proposer configs of conf/proposer (all of them that run on the target when
experiment.methods is null: the others are listed as skipped, with why), plus transformers' own
`hf_assisted` (assistant_model = the draft of proposer config experiment.assistant) and
`hf_prompt_lookup` (its prompt lookup at its defaults), and `proposer`: the run's own proposer
group with its command-line overrides (what a sweep over tree settings varies; a merged sweep names
each job's overrides). Cells: method x sampling x category.

Per prompt and sampling, plain decoding of the same target runs once, then every method still to
run, in turn (the first rotating): a method's speedup is the plain time of its own passes over
its time, so a rerun that fills in missing cells is interleaved too. Each run is appended to
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

from experiments.common import CONF, option, torch_threads, verifier_of
from experiments.compare_report import aggregate, markdown, merge, publish, write_outputs
from experiments.first_tokens import first_tokens, plot, summarise
from experiments.methods import HF_PLD_DEFAULTS, build_methods, full_length_only
from framework.core import files
from framework.core.sampling import SamplingConfig
from framework.engine import generate
from framework.lm.target import HFTarget
from framework.lm.text import encode_prompt, tokenizer_of
from framework.zoo.prompts import CATEGORIES, stdlib_prompt_sets

HF_ROWS = {"hf_assisted": "hf_assisted", "hf_prompt_lookup": "hf_pld"}  # our row -> bench_hf's runner
PLAIN = "ours_plain"
OWN = "proposer"  # the method that is the run's own proposer group (e.g. -m proposer.gamma=2,4)
ALL = "all"  # the summary rows' category: every category's runs together
CUSTOM = "prompts"  # the one category of experiment.prompts (token ids, for targets without a tokenizer)


def proposer_configs() -> list[str]:
    return sorted(p.stem for p in (CONF / "proposer").glob("*.yaml") if p.stem != "none")


def sampling_configs() -> list[str]:
    return sorted(p.stem for p in (CONF / "sampling").glob("*.yaml"))


@dataclass
class Plan:
    methods: list[str]  # row names: proposer config names and HF_ROWS keys
    proposers: dict[str, DictConfig]  # proposer config name -> its node
    samplings: dict[str, SamplingConfig]
    categories: list[str]
    skipped: dict[str, str]  # discovered proposer configs that do not run on the target -> why


def plan(cfg: DictConfig) -> Plan:
    """Every name checked before any work: unknown names fail, listing the valid ones."""
    exp = cfg.experiment
    known = proposer_configs()
    listed = exp.methods is not None
    methods = list(exp.methods) if listed else known + list(HF_ROWS)
    wrong = [m for m in methods if m not in known and m not in HF_ROWS and m != OWN]
    if wrong:
        raise ValueError(f"unknown methods {wrong} in experiment.methods (have {known + list(HF_ROWS)} and {OWN!r})")
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
    proposers = {m: option("proposer", m, cfg, "experiment.methods") for m in methods if m in known}
    if OWN in methods:  # the composed group, command-line overrides included: what a sweep varies
        proposers[OWN] = cfg.proposer
    return Plan(methods, proposers, samplings, categories, {})


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
                       "max_new_tokens": exp.max_new_tokens, "threads": exp.num_threads,
                       "prompts": OmegaConf.to_container(exp.prompts) if exp.prompts is not None else None,
                       "verifier": OmegaConf.to_container(cfg.verifier, resolve=True) if cfg.get("verifier") else None},
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


def timed_cells(plan: Plan, runners: dict, prompts: dict, records: Records) -> None:
    groups = [(c, s, i) for c in plan.categories for s in plan.samplings for i in range(len(prompts[c]))]
    turn = 0
    for category, sampling, index in tqdm(groups, desc="compare", unit="prompt"):
        missing = [m for m in plan.methods if run_id(m, sampling, category, index) not in records.done]
        if not missing:
            continue
        prompt, law = prompts[category][index], plan.samplings[sampling]
        plain = attempt(runners[PLAIN], prompt, law)
        records.add({"id": f"plain/{sampling}/{category}/{index}/{turn}", "method": "plain", "sampling": sampling,
                     "category": category, "prompt": index, **plain})
        order = missing[turn % len(missing):] + missing[: turn % len(missing)]
        turn += 1
        for method in order:
            out = attempt(runners[HF_ROWS.get(method, f"ours_{method}")], prompt, law)
            if "error" not in out and "error" not in plain:
                out["plain_seconds"] = plain["seconds"]
                out["same_as_plain"] = out["tokens"] == plain["tokens"] if law.greedy else None
            elif "error" in plain:
                out.setdefault("error", f"plain decoding failed: {plain['error']}")
            records.add({"id": run_id(method, sampling, category, index), "method": method, "sampling": sampling,
                         "category": category, "prompt": index, **{k: v for k, v in out.items() if k != "tokens"}})


def lossless_checks(cfg: DictConfig, plan: Plan, model, records: Records, out: Path) -> None:
    """G-test of the first speculated token per (method, sampling), ours only; a plot of each."""
    check = cfg.experiment.check
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
        cfg, [PLAIN, *(HF_ROWS.get(m, f"ours_{m}") for m in the_plan.methods)],
        {f"ours_{m}": node for m, node in the_plan.proposers.items()}, {"hf_pld": dict(HF_PLD_DEFAULTS)})
    records = Records(out / "records.jsonl", fingerprint(cfg))
    timed_cells(the_plan, runners, prompts, records)
    lossless_checks(cfg, the_plan, model, records, out)
    rows = aggregate(the_plan.methods, the_plan.samplings, the_plan.categories, records.done.values())
    summary = aggregate(the_plan.methods, the_plan.samplings, [ALL], [{**r, "category": ALL} for r in records.done.values()])
    result = {"rows": rows, "summary": summary, "skipped": the_plan.skipped, "settings": settings,
              "config": OmegaConf.to_container(cfg, resolve=True)}
    write_outputs(result, out)
    return result


@hydra.main(config_path="../conf", config_name="compare", version_base="1.3")
def main(cfg: DictConfig) -> None:
    if cfg.experiment.merge is not None:  # a finished -m sweep's folder: one table of its jobs, nothing run
        print(markdown(merge(Path(cfg.experiment.merge))))
        return
    if cfg.experiment.publish is not None:  # a finished run's compare.md: the results page and the README's table
        publish(Path(cfg.experiment.publish))
        return
    run(cfg)
    print((Path(cfg.output_dir) / "compare.md").read_text())


if __name__ == "__main__":
    main()
