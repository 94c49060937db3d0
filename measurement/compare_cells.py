"""The timed cells of experiments.compare: per prompt and sampling the baseline once, then every method still to
run (rotating the first), each run a record with its traces; greedy identity against plain decoding, the lossless
check of the first speculated token, and the untimed warm-up and policy priming before the clock."""

from __future__ import annotations

import json
import traceback
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig
from tqdm.auto import tqdm

from framework.control.cost_model import STEP_FIELDS, step_records
from framework.control.device_profile import DeviceProfile
from framework.core.policy import CostSized
from framework.core.prompts import prompt_lengths
from framework.lm.text import encode_prompt, tokenizer_of
from framework.metrics.trace import RequestTrace, request_traces
from measurement.common import verifier_of
from measurement.compare_grid import RUNNERS, Grid, runner_of
from measurement.compare_records import Records, Unit
from measurement.first_token_tables import first_tokens, plot, summarise
from measurement.methods import HF_METHODS
from measurement.workload import Workload, answer_text


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
