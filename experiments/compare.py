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
target: experiments.workload), a multi-turn prompt's later turns timed after the target's own answer. Every run
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
"""

from __future__ import annotations

import json
import os
import platform
import traceback
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from functools import cache
from itertools import product
from pathlib import Path

import hydra
import torch
from hydra.core.hydra_config import HydraConfig
from hydra.utils import instantiate
from omegaconf import DictConfig, ListConfig, OmegaConf
from tqdm.auto import tqdm

from engine.loop import generate
from experiments.common import (
    CONF,
    job_record,
    one_process,
    option,
    torch_threads,
    verifier_of,
    whole_number,
    without_grammar,
    write_json,
)
from experiments.compare_report import (
    FIXED,
    PREDICTION,
    PROJECTION,
    aggregate,
    markdown,
    merge,
    publish,
    write_acceptance_records,
    write_outputs,
    write_profiles,
)
from experiments.first_tokens import first_tokens, plot, summarise
from experiments.methods import HF_METHODS, HF_PLD_DEFAULTS, build_methods, full_length_only, transformers_mtp_refusal
from experiments.peers.rows import ARCTIC_ROW, missing_rows
from experiments.peers.rows import ROWS as PEER_ROWS
from experiments.throughput import THROUGHPUT_ROWS, concurrencies, curves
from experiments.workload import Workload, answer_text, build_workload
from framework.control.cost_model import STEP_FIELDS, step_records
from framework.control.device_profile import DeviceProfile
from framework.core import files
from framework.core.policy import CostSized
from framework.core.prompts import prompt_lengths
from framework.core.sampling import SamplingConfig, hf_sampling
from framework.lm.target import HFTarget
from framework.lm.text import encode_prompt, tokenizer_of
from framework.metrics.trace import RequestTrace, request_traces

# Rows that are not a conf/proposer config -> their runner (experiments.methods): plain decoding of ours and
# of transformers, transformers' assisted generation, its prompt lookup (at its defaults; matched: at our
# prompt lookup's settings), its MTP decoding and its early exit (assistant_early_exit). By default a run takes
# the speculative ones (hf_mtp where the target carries modules transformers reads).
RUNNERS = {"plain": "ours_plain", "hf_plain": "hf_plain", "hf_assisted": "hf_assisted", "hf_prompt_lookup": "hf_pld",
           "hf_pld_matched": "hf_pld_matched", "hf_mtp": "hf_mtp",
           "hf_early_exit": "hf_early_exit", ARCTIC_ROW: ARCTIC_ROW,
           **{row: row for row in PEER_ROWS}}  # vLLM's and arctic's: experiments.peers.rows
DISCOVERED = ("hf_assisted", "hf_prompt_lookup", "hf_mtp")  # hf_mtp: where transformers reads the target's MTP
BASELINES = ("plain", "hf_plain")  # experiment.baseline: the per-prompt reference of every speedup
ZOO_SUITE = "framework.workloads.zoo.ZooPrompts"
UNDER_A_GRAMMAR = ("grammar", "mix_grammar")  # draft what a grammar forces: experiments.structured times them
OWN = "proposer"  # the method that is the run's own proposer group (e.g. -m proposer.depth=2,4)
ALL = "all"  # the summary rows' category: every category's runs together


def proposer_configs() -> list[str]:
    return sorted(p.stem for p in (CONF / "proposer").glob("*.yaml") if p.stem != "none")


def runner_of(method: str) -> str:
    return RUNNERS.get(method, f"ours_{method}")


def policy_configs() -> list[str]:
    return sorted(p.stem for p in (CONF / "policy").glob("*.yaml"))


def policy_factory(name: str, cfg: DictConfig) -> Callable | None:
    """conf/policy/<name> instantiated: a factory of policy objects, or None for the fixed policy (generate's
    default)."""
    factory = instantiate(option("policy", name, cfg, "experiment.policies"))
    if factory is not None and not callable(factory):
        raise ValueError(f"experiment.policies: conf/policy/{name}.yaml must build a factory (_partial_: true), "
                         f"got a {type(factory).__name__}")
    return factory


def nonempty_list(exp: DictConfig, key: str) -> list:
    value = exp[key]
    if not isinstance(value, (ListConfig, list)) or not value:
        raise ValueError(f"experiment.{key} must be a non-empty list, got {value!r}")
    return list(value)


def batch_sizes(exp: DictConfig) -> list[int]:
    sizes = nonempty_list(exp, "batch_sizes")
    wrong = [b for b in sizes if isinstance(b, bool) or not isinstance(b, int) or b < 1]
    if wrong or len(set(sizes)) < len(sizes):
        raise ValueError(f"experiment.batch_sizes must hold distinct integers >= 1, got {sizes}")
    return sizes


def sampling_configs() -> list[str]:
    return sorted(p.stem for p in (CONF / "sampling").glob("*.yaml"))


@dataclass
class Grid:
    methods: list[str]  # row names: proposer config names and RUNNERS keys
    proposers: dict[str, DictConfig]  # proposer config name -> its node
    samplings: dict[str, SamplingConfig]
    categories: list[str]
    skipped: dict[str, str]  # discovered proposer configs that do not run on the target -> why
    pld: dict[str, dict]  # transformers' prompt-lookup rows -> their num_tokens / max_ngram
    policies: dict[str, Callable | None]  # experiment.policies -> a factory of policy objects (None: fixed)
    batch_sizes: list[int]
    decide_by: DeviceProfile | None = None  # experiment.policy_profile: the costs cost-sized policies decide from

    def runs(self, method: str, policy: str, batch: int) -> bool:
        """A policy sizes a proposer's speculation: a proposer runs under each listed policy, rows without one (plain,
        transformers') under fixed only, whatever the list; transformers' runners decode one prompt at a time."""
        sized = policy in self.policies if method in self.proposers else policy == FIXED
        return sized and (batch == 1 or runner_of(method) not in HF_METHODS)

    @property
    def every_policy(self) -> list[str]:
        """The listed policies, and fixed where a row without a proposer runs under it unlisted."""
        unsized = any(m not in self.proposers for m in self.methods)
        return list(self.policies) + ([FIXED] if unsized and FIXED not in self.policies else [])

    def rows(self, batch: int) -> list[tuple[str, str]]:
        """The (method, policy) pairs timed at this batch size."""
        return [(m, p) for m in self.methods for p in self.every_policy if self.runs(m, p, batch)]


def grid_of(cfg: DictConfig) -> Grid:
    """Every name checked before any work: unknown names fail, listing the valid ones."""
    exp = cfg.experiment
    without_grammar(cfg, "experiments.compare")
    known = proposer_configs()
    listed = exp.methods is not None
    serving = exp.get("concurrency") is not None  # throughput against concurrency (experiments/throughput.py)
    rows = ["plain", *THROUGHPUT_ROWS] if serving else list(RUNNERS)
    methods = list(exp.methods) if listed else \
        [m for m in known if m not in UNDER_A_GRAMMAR] + (["plain", *THROUGHPUT_ROWS] if serving else list(DISCOVERED))
    wrong = [m for m in methods if m not in known and m not in rows and m != OWN]
    if wrong:
        raise ValueError(f"unknown methods {wrong} in experiment.methods (have {known + rows} and {OWN!r}"
                         + (", with experiment.concurrency" if serving else "") + ")")
    if serving:
        concurrencies(exp)
    if exp.baseline not in BASELINES:
        raise ValueError(f"experiment.baseline must be one of {list(BASELINES)}, got {exp.baseline!r}")
    if OWN in methods and cfg.proposer is None:
        raise ValueError(f"experiment.methods: {OWN!r} is the run's own proposer group, but proposer=none")
    categories = []  # the workload's (experiments.workload.build_workload checks experiment.categories)
    whole_number("experiment.max_new_tokens", exp.max_new_tokens, 1)  # an empty decode has no speed nor identity
    whole_number("experiment.per_category", exp.per_category, 1)
    whole_number("experiment.warmup", exp.warmup, 0)
    whole_number("experiment.check.samples", exp.check.samples, 0)
    if exp.samples is not None and (isinstance(exp.samples, bool) or not isinstance(exp.samples, int)
                                    or exp.samples < 1):
        raise ValueError("experiment.samples must be an integer >= 1 (prompts timed in all) or null, "
                         f"got {exp.samples!r}")
    wrong = [s for s in exp.samplings if s not in sampling_configs()]
    if wrong:
        raise ValueError(f"unknown samplings {wrong} in experiment.samplings (have {sampling_configs()})")
    samplings = {s: instantiate(option("sampling", s, cfg, "experiment.samplings")) for s in exp.samplings}
    if RUNNERS[exp.baseline].startswith("hf_"):  # every speedup needs it: refused here, before any work (a
        for law in samplings.values():         # method's row that cannot run a sampling is recorded with its error)
            hf_sampling(law)
    sizes = batch_sizes(exp)
    if RUNNERS[exp.baseline] in HF_METHODS and sizes != [1]:
        raise ValueError(f"experiment.baseline={exp.baseline} decodes one prompt at a time: experiment.batch_sizes "
                         f"must be [1] with it, got {sizes}")
    wrong = [p for p in nonempty_list(exp, "policies") if p not in policy_configs()]
    if wrong:
        raise ValueError(f"unknown policies {wrong} in experiment.policies (have {policy_configs()})")
    policies = {p: policy_factory(p, cfg) for p in exp.policies}
    device_profiles(exp)  # a wrong path or file fails before any work
    proposers = {m: option("proposer", m, cfg, "experiment.methods") for m in methods if m in known}
    if OWN in methods:  # the composed group, command-line overrides included: what a sweep varies
        proposers[OWN] = cfg.proposer
    skipped = missing_rows(cfg, methods)  # a peer engine whose environment is not built: said, not run
    methods = [m for m in methods if m not in skipped]
    decide_by = DeviceProfile.load(exp.policy_profile) if exp.get("policy_profile") else None
    if decide_by is not None:  # every cell's costs are in it, before any work
        for method, sampling, batch in product(proposers, samplings, sizes):
            decide_by.step_costs(method, sampling, batch)
    return Grid(methods, proposers, samplings, categories, skipped, pld_variants(cfg, methods), policies, sizes,
                decide_by)


def probe(grid: Grid, model, prompt: torch.Tensor, listed: bool) -> None:
    """Drops (discovered) or refuses (listed) proposer configs that cannot be built for this target
    or cannot decode on it (two tokens each), and transformers' MTP row where it would not read the target's own
    modules, before any timing."""
    refusal = transformers_mtp_refusal(model) if "hf_mtp" in grid.methods else None
    if refusal is not None:
        if listed:
            raise ValueError(f"experiment.methods: hf_mtp does not run on this target: {refusal}")
        grid.skipped["hf_mtp"] = refusal
        grid.methods.remove("hf_mtp")
    target = HFTarget(model)
    for name, node in list(grid.proposers.items()):
        try:
            generate(target, instantiate(node)(), prompt, 2, SamplingConfig(temperature=0))
        except Exception as error:  # noqa: BLE001 - any failure means "does not run here"
            if listed:
                raise ValueError(f"experiment.methods: {name} does not run on this target: {error}") from error
            grid.skipped[name] = f"{type(error).__name__}: {error}"
            del grid.proposers[name]
            grid.methods.remove(name)


def fingerprint(cfg: DictConfig, batch: int = 1) -> str:
    """What a stored record of this batch size must share with this run to be reused."""
    exp = cfg.experiment
    fields = {"target": OmegaConf.to_container(cfg.target, resolve=True), "seed": cfg.seed,
              "max_new_tokens": exp.max_new_tokens, "threads": exp.num_threads, "baseline": exp.baseline,
              "prompts": OmegaConf.to_container(exp.prompts) if exp.prompts is not None else None,
              "verifier": OmegaConf.to_container(cfg.verifier, resolve=True) if cfg.get("verifier") else None,
              # the run's own proposer group is one row name whatever its settings: its records are its settings'
              "own": OmegaConf.to_container(cfg.proposer, resolve=True) if OWN in (exp.methods or []) else None}
    # vLLM's settings name its rows' records (runs without keep theirs)
    if any(m in PEER_ROWS for m in exp.methods or []):
        fields["vllm"] = OmegaConf.to_container(exp.vllm, resolve=True)
    if batch != 1:  # B = 1 keeps the key of the records made before the batch axis
        fields["batch"] = batch
    # the zoo's keeps the keys made before workloads
    if exp.prompts is None and cfg.workload.suite._target_ != ZOO_SUITE:
        fields["workload"] = OmegaConf.to_container(cfg.workload, resolve=True)
    return json.dumps(fields, sort_keys=True)  # a token-id workload is not named by its category and index


def record_key(cfg: DictConfig) -> Callable[[dict], str]:
    """A record's key: the fingerprint at its batch size (a record without one is of batch size 1)."""
    at = cache(lambda batch: fingerprint(cfg, batch))
    return lambda record: at(record.get("batch", 1))


class Records:
    """records.jsonl: one line per finished run or check, appended at once (nothing computed is lost; a line
    cut off by a kill is dropped on the next read, and its run made again)."""

    def __init__(self, path: Path, key: Callable[[dict], str]):
        self.path, self.key = path, key
        self.done = {record["id"]: record for record in files.read_json_lines(path) if record.get("key") == key(record)}

    def add(self, record: dict) -> None:
        record = {**record, "key": self.key(record)}
        self.done[record["id"]] = record
        files.append_line(self.path, json.dumps(record))


@dataclass(frozen=True)
class Unit:
    """One timed workload: `batch` prompts of a category from its prompt `index` on, under one sampling."""

    category: str
    sampling: str
    batch: int
    index: int
    turn: int = 1  # of a multi-turn prompt: later turns follow the target's own answer to the one before

    def axes(self, policy: str) -> str:
        """The id's tail: empty for the fixed policy at B = 1 and turn 1, so the records made before these axes
        stay valid."""
        return ((f"/policy={policy}" if policy != FIXED else "") + (f"/batch={self.batch}" if self.batch != 1 else "")
                + (f"/turn={self.turn}" if self.turn != 1 else ""))

    def run_id(self, method: str, policy: str = FIXED) -> str:
        return f"run/{method}/{self.sampling}/{self.category}/{self.index}{self.axes(policy)}"

    def plain_id(self, turn: int) -> str:
        return f"plain/{self.sampling}/{self.category}/{self.index}/{turn}{self.axes(FIXED)}"

    def fields(self) -> dict:
        return {"sampling": self.sampling, "category": self.category, "prompt": self.index, "batch": self.batch,
                "turn": self.turn}


class Policies:
    """One policy object per (method, policy, sampling, batch size), made at its first use: it learns costs and
    acceptance over that cell's prompts, never from another method or sampling."""

    def __init__(self, factories: dict[str, Callable | None], decide_by: DeviceProfile | None = None):
        self.factories, self.decide_by, self.made = factories, decide_by, {}

    def of(self, method: str, policy: str, unit: Unit):
        key = (method, policy, unit.sampling, unit.batch)
        if key not in self.made:
            factory = self.factories.get(policy)  # fixed unlisted (a row without a proposer): none
            made = self.made[key] = factory() if factory is not None else None
            if self.decide_by is not None and isinstance(made, CostSized):  # sized by the profile: no clock
                made.use_costs(self.decide_by.step_costs(method, unit.sampling, unit.batch))
        return self.made[key]


def attempt(runner, prompt, law, policy=None, think_end: int | None = None, cell: tuple | None = None) -> dict:
    """A run's record: its tokens, clock, forwards and, per row, the trace every metric is computed from
    (framework.metrics; transformers' runners have no steps: their clock and first-token time only). cell: the
    (method, policy, sampling, batch) whose proposers share stores across requests (None: the method's own)."""
    try:
        timed = runner(prompt, law, policy, cell=cell)
    except Exception as error:  # noqa: BLE001 - recorded, the rest goes on
        return {"error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc(limit=3)}
    new, seconds, stats = timed.tokens, timed.seconds, timed.stats
    out = {"tokens": new, "new_tokens": sum(len(row) for row in new), "seconds": seconds, "forwards": timed.forwards}
    traces = (request_traces(stats.steps, len(new), new, timed.ttft_s, seconds, think_end, think_end is not None)
              if stats is not None else [RequestTrace((), (), (), len(row), timed.ttft_s, seconds) for row in new])
    out["traces"] = [asdict(t) for t in traces]
    if timed.counters is not None:  # a peer engine's, over the whole run
        out.update(counters=asdict(timed.counters), engine=timed.engine)
    if stats is not None:
        summary = stats.summary()
        # steps: the (step, row) pairs that decoded, so that accepted / steps is per row at any batch size
        out.update(steps=sum(s.accepted.numel() for s in stats.steps), accepted=stats.accepted_total,
                   split={k: summary[k] for k in ("draft_s", "target_s", "verify_s", "other_s")},
                   accepted_counts=(torch.cat([s.accepted.flatten() for s in stats.steps]).tolist()
                                    if stats.steps else []))
        # what the cost model predicts the run's seconds from (framework/control/cost_model.py), column by column
        prompts = prompt_lengths(prompt).tolist()
        out.update(prompt_tokens=prompts, step_trace={k: [getattr(s, k) for s in step_records(stats.steps, prompts)]
                                                      for k in STEP_FIELDS})
    return out


def timed_cells(grid: Grid, runners: dict, work: Workload, records: Records, baseline: str,
                explain: Callable | None = None) -> None:
    units = [Unit(c, s, b, i, t) for c in grid.categories for s in grid.samplings for b in grid.batch_sizes
             for i in range(work.units[c]) for t in range(1, work.turns(c, i) + 1)]
    policies, rotation, think_end = Policies(grid.policies, grid.decide_by), 0, work.think_end()
    for unit in tqdm(units, desc="compare", unit="run"):
        missing = [(m, p) for m, p in grid.rows(unit.batch) if unit.run_id(m, p) not in records.done]
        if not missing:
            continue
        law = grid.samplings[unit.sampling]
        try:
            prompt = work.batch(unit.category, unit.index, unit.batch, unit.turn,
                                answers(runners[RUNNERS[baseline]], work, records, unit.sampling, law))
        except Exception as error:  # noqa: BLE001 - a prompt that cannot be made (its turn too long): recorded
            for method, policy in missing:
                records.add({"id": unit.run_id(method, policy), "method": method, "policy": policy, **unit.fields(),
                             "error": f"{type(error).__name__}: {error}"})
            continue
        plain = attempt(runners[RUNNERS[baseline]], prompt, law, think_end=think_end)
        plain_id = unit.plain_id(rotation)
        records.add({"id": plain_id, "method": "plain", **unit.fields(), **plain})
        order = missing[rotation % len(missing):] + missing[: rotation % len(missing)]
        rotation += 1
        for method, policy in order:
            out = attempt(runners[runner_of(method)], prompt, law, policies.of(method, policy, unit), think_end,
                          cell=(method, policy, unit.sampling, unit.batch))
            if "error" not in out and "error" not in plain:
                out["plain_seconds"], out["plain_forwards"], out["plain_id"] = (
                    plain["seconds"], plain["forwards"], plain_id)
                out.update(greedy_identity(out["tokens"], plain["tokens"], prompt, explain) if law.greedy
                           else {"same_as_plain": None})
            elif "error" in plain:
                out.setdefault("error", f"plain decoding failed: {plain['error']}")
            records.add({"id": unit.run_id(method, policy), "method": method, "policy": policy, **unit.fields(),
                         **{k: v for k, v in out.items() if k != "tokens"}})


def logits_of(model) -> Callable:
    """explain(prompt [L], tokens before, candidates) -> the target's float32 logits of the candidates after the
    prompt and those tokens (transformers' own forward of the whole sequence)."""
    @torch.no_grad()
    def explain(prompt: torch.Tensor, before: list[int], candidates: list[int]) -> list[float]:
        ids = torch.cat([prompt.cpu(), torch.tensor(before, dtype=torch.long)])[None].to(
            next(model.parameters()).device)
        logits = model(ids).logits[0, -1].float()
        return [float(logits[c]) for c in candidates]
    return explain


def answers(baseline, work: Workload, records: Records, sampling: str, law) -> Callable:
    """answer(category, index, turn) -> the target's own answer to that turn of the prompt: the baseline's plain
    decoding of it under this sampling (seeded), made once and kept in the records (a rerun reads it)."""
    def answer(category: str, index: int, turn: int) -> str:
        rid = f"answer/{sampling}/{category}/{index}/{turn}"
        if rid not in records.done:
            out = attempt(baseline, work.ids(category, index, turn, answer), law)
            if "error" in out:
                raise ValueError(f"the target's answer to turn {turn} of prompt {index} ({category}): {out['error']}")
            records.add({"id": rid, "tokens": out["tokens"][0]})
        return answer_text(work.tokenizer, records.done[rid]["tokens"])
    return answer


def greedy_identity(rows: list[list[int]], plain: list[list[int]], prompt: torch.Tensor | None = None,
                    explain: Callable | None = None) -> dict:
    """Every row against plain decoding's row of the same batch; the first row that differs is named: the position,
    both tokens and, with `explain`, the target's logits of both there (a rounding flip has them within a hair)."""
    same = [a == b for a, b in zip(rows, plain)]
    out = {"same_as_plain": all(same) and len(rows) == len(plain), "identical_rows": sum(same)}
    row = next((i for i, equal in enumerate(same) if not equal), None)
    if row is not None:
        position = next((j for j, (a, b) in enumerate(zip(rows[row], plain[row])) if a != b), None)
        if position is None:
            out["first_difference"] = {"row": row, "lengths": [len(rows[row]), len(plain[row])]}
        else:
            theirs, ours = rows[row][position], plain[row][position]
            out["first_difference"] = {"row": row, "position": position, "plain": ours, "method": theirs}
            if explain is not None and prompt is not None:
                out["first_difference"]["logits"] = explain(prompt[row], plain[row][:position], [ours, theirs])
    return out


def lossless_checks(cfg: DictConfig, grid: Grid, model, records: Records, out: Path) -> None:
    """G-test of the first speculated token per (method, sampling), ours only; a plot of each."""
    check = cfg.experiment.check
    if not check.samples:  # a preset that times only (experiment=categories, bench_hf)
        return
    prompt = encode_prompt(cfg.prompt, tokenizer_of(model))
    checked = cfg.prompt if isinstance(cfg.prompt, str) else list(cfg.prompt)  # text or token ids
    for method in grid.proposers:
        for sampling, law in grid.samplings.items():
            rid = f"check/{method}/{sampling}/{check.samples}/{json.dumps(checked)}"  # its N and prompt
            if rid in records.done or law.greedy:  # greedy: identity with plain decoding is the check
                continue
            try:
                result = first_tokens(model, instantiate(grid.proposers[method]), prompt, law, check.samples,
                                      check.batch, cfg.seed, verifier_of(cfg))
                stats = summarise(result["counts"], result["target"])
                plot(result, check.top, out / f"first_token_{method}_{sampling}.png",
                     f"{method} ({sampling}): first token, N={stats['samples']:,}; G-test p={stats['g_test_p']:.3f}")
                record = {"samples": stats["samples"], "detectable_tv": stats["detectable_tv"],
                          "g_test_p": stats["g_test_p"], "passes": stats["g_test_passes"]}
            except Exception as error:  # noqa: BLE001
                record = {"error": f"{type(error).__name__}: {error}"}
            records.add({"id": rid, "method": method, "sampling": sampling, **record})


def warm_up(runners: dict, work: Workload, grid: Grid, rounds: int) -> None:
    """Untimed rounds of every runner on the first unit at each batch size (the first call of a model pays
    for its allocations; transformers' first generate for its setup)."""
    category = next(iter(work.units))
    for _ in range(rounds):
        for batch in grid.batch_sizes:
            prompt = work.batch(category, 0, batch)
            for law in grid.samplings.values():
                for name, runner in runners.items():
                    if batch == 1 or name not in HF_METHODS:
                        attempt(runner, prompt, law)


def prime_policies(runners: dict, work: Workload, grid: Grid) -> None:
    """One untimed generation per policy besides fixed and batch size, with a throwaway policy object: a policy's
    first generation at a batch size may measure the target (goodput's cost table, cached on disk), which
    the first timed prompt of each cell would otherwise pay for."""
    sized = [m for m in grid.methods if m in grid.proposers]
    factories = [f for f in grid.policies.values() if f is not None]
    if not sized or not factories:
        return
    category, law = next(iter(work.units)), next(iter(grid.samplings.values()))
    for factory in factories:
        for batch in grid.batch_sizes:
            attempt(runners[runner_of(sized[0])], work.batch(category, 0, batch), law, factory())


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


def device_profiles(exp: DictConfig) -> dict[str, DeviceProfile]:
    """experiment.profile (this machine's: predictions) and experiment.project (another device's: projections)."""
    named = {PREDICTION: exp.get("profile"), PROJECTION: exp.get("project")}
    return {name: DeviceProfile.load(path) for name, path in named.items() if path}


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


def pld_variants(cfg: DictConfig, methods: list[str]) -> dict:
    """transformers' prompt lookup at its defaults, and (when hf_pld_matched runs) matched to the settings of
    our prompt-lookup config experiment.pld_matched."""
    variants = {"hf_pld": dict(HF_PLD_DEFAULTS)}
    if "hf_pld_matched" in methods:
        matched = option("proposer", cfg.experiment.pld_matched, cfg, "experiment.pld_matched")
        if "depth" not in matched or "max_ngram" not in matched:
            raise ValueError(f"experiment.pld_matched={cfg.experiment.pld_matched!r} is not a prompt lookup config "
                             "(it needs depth and max_ngram)")
        # our depth is transformers' num_output_tokens (prompt_lookup_num_tokens): its name, as HF_PLD_DEFAULTS
        variants["hf_pld_matched"] = {"num_tokens": int(matched.depth), "max_ngram": int(matched.max_ngram)}
    return variants


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
