"""A device profile: what each part of a decoding step costs here, for the cost model to predict runs from.

    python -m experiments.profile_device                                   # the zoo target, conf/profile_device.yaml
    python -m experiments.profile_device 'methods=[plain,eagle3]' 'batches=[1,4]' threads=2

Measured, at the run's thread count (CUDA: every clock after a synchronisation, the engine's own), in `repeats`
rounds, each round the forward table then every method in turn (a shared machine's drift slows all alike):
- the target's verification forward by rows, context and tree nodes (a prefix of a breadth-first binary tree per
  row: Target.forward_costs after a warm-up call, sizes interleaved; the mean over rounds);
- per method and sampling, generations of held-out text at each plan depth in `levels` and at the proposer's own
  setting, whose steps give: the drafting seconds by levels drafted and the target laws and verification by nodes
  (least-squares lines over every step: a level that few steps reached is not one noisy mean), the rest of a
  step (the generation's seconds less its start and its steps' parts, per step), the start (the target's and the
  proposer's prefill) by prompt tokens, and the method's target forwards against the table (`target_scale`: on a
  CPU a drafter between two forwards evicts the target's weights from the caches).

Writes `out` (framework/control/device_profile.py) with the hardware and versions; experiments.compare reads it
with experiment.profile=<that file> and prints each row's predicted speedup beside the measured one.

    python -m experiments.profile_device projection=h100_8b measured=<device_profile.json>

projects a measured profile onto published peak figures (framework/control/roofline.py, conf/projection): a
profile of kind "projection", which experiment.project=<that file> sets beside the measured rows.
"""

from __future__ import annotations

import logging
import platform
import statistics
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

import hydra
import torch
import transformers
from hydra.utils import instantiate
from omegaconf import DictConfig

from engine.loop import DecodeOptions, generate
from framework.control.cost_model import step_records
from framework.control.device_profile import PLAIN, DeviceProfile, interpolate
from framework.core.policy import AtDepth
from framework.lm.target import HFTarget
from measurement.common import option, text_ids, torch_threads

log = logging.getLogger(__name__)
MOST_NODES = 254  # Target.forward_costs' binary tree


def forward_table(target: HFTarget, ids: list[int], batches, contexts, nodes, repeats: int) -> dict:
    """batch -> context -> nodes -> seconds of one verification forward."""
    table = {}
    for B in batches:
        table[B] = {}
        for L in contexts:
            target.prefill(torch.tensor([ids[b * L: (b + 1) * L] for b in range(B)]))  # each row its own text
            table[B][L] = target.forward_costs(list(nodes), repeats)
    return table


def line(points: list[tuple[float, float]], upto: int) -> dict[int, float]:
    """The least-squares line through (x, y) as a two-point table {0: a, upto: a + b upto} (one x: flat)."""
    xs, ys = [p[0] for p in points], [p[1] for p in points]
    mean_x, mean_y = statistics.fmean(xs), statistics.fmean(ys)
    spread = sum((x - mean_x) ** 2 for x in xs)
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / spread if spread else 0.0
    return {0: mean_y - slope * mean_x, upto: mean_y + slope * (upto - mean_x)}


@dataclass
class Samples:
    """One method's measurements, gathered over the rounds (per sampling and batch size where they depend on them)."""

    starts: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))  # B -> P -> prefill seconds
    rest: dict = field(default_factory=lambda: defaultdict(list))  # B -> the rest per step of each generation
    draft: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))  # s -> B -> (levels, s)
    verify: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))  # s -> B -> (nodes, s)
    # s -> B -> (measured, table) s
    target: dict = field(default_factory=lambda: defaultdict(lambda: defaultdict(list)))


def generations(target: HFTarget, factory, samplings: dict, ids: list[int], cfg: DictConfig, into: Samples | None,
                seed: int, steps_table: Callable) -> None:
    """One generation of each (sampling, batch size, prompt length, plan depth), its steps added to `into` (None:
    untimed, a warm-up). steps_table(step record) -> the forward table's seconds for that step."""
    for sampling_name, sampling in samplings.items():
        for B in cfg.batches:
            for P in cfg.prompt_tokens:
                prompt = torch.tensor([ids[b * P: (b + 1) * P] for b in range(B)])
                for depth in [None] if factory is None else [None, *cfg.levels]:
                    proposer = factory() if factory is not None else None
                    start = time.perf_counter()
                    out = generate(target, proposer, prompt, cfg.max_new_tokens, sampling, seed=seed,
                                   options=DecodeOptions(policy=AtDepth(depth)))
                    seconds = time.perf_counter() - start
                    if into is None:
                        continue
                    steps = out.stats.steps
                    parts = sum(s.draft_s + s.target_s + s.verify_s for s in steps)
                    into.starts[B][P].append(out.stats.prefill_s)
                    into.rest[B].append((seconds - out.stats.prefill_s - parts) / max(len(steps), 1))
                    for s, step in zip(steps, step_records(steps, [P] * B)):
                        into.draft[sampling_name][B].append((step.levels, s.draft_s))
                        into.verify[sampling_name][B].append((step.nodes_per_row, s.verify_s))
                        into.target[sampling_name][B].append((s.target_s, steps_table(step)))


def tables_of(samples: Samples, drafts: bool) -> dict:
    """A method's tables: its start by prompt tokens, drafting by levels and verification by nodes (lines), the rest
    per step, and its target forwards against the forward table."""
    mean = statistics.fmean  # a run's seconds are sums: the mean step, not the median, predicts them
    deepest = lambda points: max(1, max(x for x, _ in points))  # noqa: E731
    return {
        "prefill": {B: {P: mean(v) for P, v in by_p.items()} for B, by_p in samples.starts.items()},
        "other": {B: mean(v) for B, v in samples.rest.items()},
        "draft": {s: {B: line(points, deepest(points)) for B, points in by_b.items()}
                  for s, by_b in samples.draft.items()}
        if drafts else {},
        "verify": {s: {B: line(points, MOST_NODES) for B, points in by_b.items()}
                   for s, by_b in samples.verify.items()},
        "target_scale": {s: {B: sum(m for m, _ in pairs) / sum(t for _, t in pairs) for B, pairs in by_b.items()}
                         for s, by_b in samples.target.items()},
    }


def hardware(target: HFTarget) -> dict:
    gpu = torch.cuda.get_device_name(target.device) if target.device.type == "cuda" else None
    return {"cpu": platform.processor() or platform.machine(), "gpu": gpu, "threads": torch.get_num_threads(),
            "system": platform.platform(terse=True), "python": platform.python_version(), "torch": torch.__version__,
            "transformers": transformers.__version__, "measured": time.strftime("%Y-%m-%d %H:%M:%S")}


def profile(cfg: DictConfig) -> DeviceProfile:
    if not cfg.methods or not cfg.samplings or not cfg.batches:
        raise ValueError("methods, samplings and batches must each name at least one")
    if max(cfg.nodes) > MOST_NODES or min(cfg.nodes) != 0:
        raise ValueError(f"nodes must start at 0 and stay <= {MOST_NODES}, got {list(cfg.nodes)}")
    nodes = {m: None if m == PLAIN else option("proposer", m, cfg, "methods") for m in cfg.methods}
    samplings = {s: instantiate(option("sampling", s, cfg, "samplings")) for s in cfg.samplings}
    target = HFTarget(instantiate(cfg.target))
    positions = getattr(target.model.config, "max_position_embeddings", None)
    longest = max(max(cfg.contexts) + max(cfg.nodes) + 1, max(cfg.prompt_tokens) + cfg.max_new_tokens)
    if positions is not None and longest > positions:
        raise ValueError(f"a context and its nodes, or a prompt and its new tokens, reach {longest} positions; "
                         f"the target has {positions}: lower contexts, nodes or prompt_tokens")
    ids = text_ids(target.model, max(max(cfg.contexts), max(cfg.prompt_tokens)) * max(cfg.batches))
    factories = {m: instantiate(node) if node is not None else None for m, node in nodes.items()}  # models loaded once
    for factory in factories.values():
        generations(target, factory, samplings, ids, cfg, None, cfg.seed, lambda step: 0.0)  # first calls build caches
    # round by round, every method in turn (the forward table too): a shared machine's drift slows them alike
    rounds, samples = [], {m: Samples() for m in nodes}
    for round_ in range(cfg.repeats):
        log.info("round %d of %d", round_ + 1, cfg.repeats)
        table = forward_table(target, ids, cfg.batches, cfg.contexts, cfg.nodes, 1)
        rounds.append(table)
        for name, factory in factories.items():
            generations(target, factory, samplings, ids, cfg, samples[name], cfg.seed + round_,
                        lambda step: interpolate(table, step.rows, step.context, step.nodes_per_row + step.side_rows))
    forward = {B: {L: {n: statistics.fmean(t[B][L][n] for t in rounds) for n in by_n} for L, by_n in by_l.items()}
               for B, by_l in rounds[0].items()}
    tables = {m: tables_of(samples[m], nodes[m] is not None) for m in nodes}
    pick = lambda key: {m: t[key] for m, t in tables.items()}  # noqa: E731
    return DeviceProfile(hardware(target), target.cost_key(), forward, pick("prefill"),
                         {m: t["draft"] for m, t in tables.items() if nodes[m] is not None}, pick("verify"),
                         pick("other"), pick("target_scale"),
                         notes={"max_new_tokens": cfg.max_new_tokens, "levels": list(cfg.levels),
                                "rounds": cfg.repeats})


@hydra.main(config_path="../conf", config_name="profile_device", version_base="1.3")
def main(cfg: DictConfig) -> None:
    if cfg.measured is not None:
        measured = DeviceProfile.load(cfg.measured)
    else:
        with torch_threads(cfg.threads), torch.no_grad():
            measured = profile(cfg)
        measured.save(cfg.out)
        print(f"device profile of {measured.target} ({measured.hardware['threads']} threads): {cfg.out}")
    if cfg.get("projection") is not None:
        projection = instantiate(cfg.projection, _convert_="object")
        projection.of(measured).save(cfg.projected_out)
        print(f"projected onto {projection.device.name} (a projection, not a measurement): {cfg.projected_out}")


if __name__ == "__main__":
    main()
