"""Rows of different lengths in one batch, in law: the exact joint law of the rows' first tokens is the product of
each prompt's own law (the target's, teacher-forced), so every row decodes as it would alone and the rows share no
coin. Each enumerated world is a whole batch of the prompts (`RowGroups` hands one world's coins to its rows), the
rows finishing at different steps when an EOS ends one early.
"""

from __future__ import annotations

import itertools
from typing import Callable, Sequence

import torch

from engine.loop import DecodeOptions, Decoder
from engine.scheduler import Request, Scheduler
from framework.core.policy import FixedPolicy, Plan
from framework.core.prompts import ragged_batch
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from harness.enumerate import EnumeratingSource, enumerate_law
from harness.exact import Comparison, compare
from harness.real import ProposerFactory, run_first_tokens, teacher_forced_law
from verifiers import LOSSLESS, Verifier


class RowGroups:
    """A random source over a batch of worlds x `group` rows: each world's coins (of the enumerating `source`) serve
    its `group` consecutive rows, which draw them independently as any rows of a batch do."""

    def __init__(self, source: EnumeratingSource, group: int):
        self.source, self.group = source, group

    @property
    def batch_size(self) -> int:
        return self.source.batch_size * self.group

    def _worlds(self, shape) -> tuple[int, ...]:
        if len(shape) == 0 or shape[0] != self.batch_size:
            raise ValueError(f"random calls must lead with the batch ({self.batch_size}), got shape {tuple(shape)}")
        return (self.source.batch_size, self.group, *shape[1:])

    def uniform(self, shape, device="cpu"):
        return self.source.uniform(self._worlds(tuple(shape)), device).reshape(*shape)

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        drawn = self.source.categorical(probs.reshape(*self._worlds(probs.shape[:-1]), probs.shape[-1]))
        return drawn.reshape(probs.shape[:-1])

    def retire(self, rows: Sequence[int]) -> None:
        """A world is settled when all its rows are."""
        done = set(rows)
        self.source.retire([w for w in range(self.source.batch_size)
                            if all(w * self.group + r in done for r in range(self.group))])


class TakingTurns(FixedPolicy):
    """A per-row plan to check with: at step s, the row started i-th may draft when (i + s) is even; the others
    decode plainly in the same forward (one position each where the target packs: framework/lm/packing.py). Its plan
    reads the step and the row's parity only, so batched worlds (rows w x group + r, group even) share it."""

    couples_rows = False  # a plan of no row's tokens: worlds may share a batch

    def start(self, target, batch_size: int) -> None:
        self.ids, self.step, self.started = torch.arange(batch_size), 0, batch_size

    def plan(self) -> Plan:
        self.step += 1
        return Plan(rows=(self.ids + self.step) % 2 == 0)

    def select(self, rows: torch.Tensor) -> None:
        self.ids = self.ids[rows.cpu()]

    def admit(self, count: int) -> None:
        self.ids = torch.cat([self.ids, torch.arange(self.started, self.started + count)])
        self.started += count


def ragged_loop_law(
    target_model, proposer_factory: ProposerFactory, prompts: Sequence[Sequence[int]], depth: int,
    sampling: SamplingConfig, eos_token_id: int | None = None, verifier: Verifier = LOSSLESS,
    policy_factory: Callable | None = None, batch_size: int = 256, target_factory: Callable = HFTarget,
) -> dict[tuple, float]:
    """Exact joint law of the first `depth` tokens of each prompt, decoded as the rows of one batch by the real loop."""
    group, batch = len(prompts), ragged_batch(list(prompts))
    couples = lambda part: getattr(part, "couples_rows", True)  # noqa: E731  a policy's plan may read every row
    if (policy_factory is not None and couples(policy_factory())) or \
            (proposer_factory is not None and getattr(proposer_factory(), "couples_rows", False)):
        batch_size = 1  # one tree shape for the batch: worlds may not share one

    def run(source: EnumeratingSource) -> list[tuple]:
        rng = RowGroups(source, group)
        options = DecodeOptions(verifier, policy_factory() if policy_factory else None, eos_token_id=eos_token_id)
        decoder = Decoder(target_factory(target_model), proposer_factory() if proposer_factory else None, sampling, rng,
                          options)
        ids = batch.repeat(source.batch_size, 1)  # world w: rows w * group ..
        rows = run_first_tokens(decoder, ids, ids.shape[0], depth, expand=False, on_finished=rng.retire)
        return [tuple(rows[w * group:(w + 1) * group]) for w in range(source.batch_size)]

    return enumerate_law(run, batch_size)


def product_law(laws: Sequence[dict]) -> dict[tuple, float]:
    """The law of independent rows: each row's own law, multiplied."""
    return {tuple(k for k, _ in combo): float(torch.tensor([w for _, w in combo], dtype=torch.float64).prod())
            for combo in itertools.product(*(law.items() for law in laws))}


def check_ragged_law(target_model, proposer_factory: ProposerFactory, prompts: Sequence[Sequence[int]], depth: int,
                     sampling: SamplingConfig, eos_token_id: int | None = None, **loop) -> Comparison:
    """The joint law of a batch of prompts of different lengths against the product of the target's laws."""
    alone = [teacher_forced_law(target_model, torch.tensor([list(p)]), depth, sampling, eos_token_id) for p in prompts]
    return compare(ragged_loop_law(target_model, proposer_factory, prompts, depth, sampling, eos_token_id, **loop),
                   product_law(alone))


class OneWorld:
    """A random source for a run of one world: every row of every call draws that world's coins (a scheduler's
    batch changes size as requests join and leave)."""

    def __init__(self, source: EnumeratingSource):
        if source.batch_size != 1:
            raise ValueError(f"a run with a changing batch plays one world at a time, got {source.batch_size}")
        self.source = source

    def uniform(self, shape, device="cpu"):
        return self.source.uniform((1, *shape), device).reshape(*shape)

    def categorical(self, probs: torch.Tensor) -> torch.Tensor:
        return self.source.categorical(probs[None]).reshape(probs.shape[:-1])


def scheduled_loop_law(target_model, proposer_factory: ProposerFactory, requests: Sequence[tuple[Sequence[int], int]],
                       max_batch: int, sampling: SamplingConfig, eos_token_id: int | None = None,
                       policy_factory: Callable | None = None, **scheduler) -> dict[tuple, float]:
    """Exact joint law of the tokens of requests (prompt, budget) decoded by the continuous-batching scheduler with
    at most `max_batch` at a time: later requests are admitted as earlier ones end (at different steps per world)."""
    def run(source: EnumeratingSource) -> list[tuple]:
        runner = Scheduler(target_model, proposer_factory, sampling, max_batch, rng=OneWorld(source),
                           eos_token_id=eos_token_id, policy=policy_factory() if policy_factory else None, **scheduler)
        done = runner.run([Request(list(prompt), budget) for prompt, budget in requests])
        return [tuple(tuple(f.tokens) for f in done)]

    return enumerate_law(run, 1)


def check_scheduled_law(target_model, proposer_factory: ProposerFactory, requests: Sequence[tuple[Sequence[int], int]],
                        max_batch: int, sampling: SamplingConfig, eos_token_id: int | None = None,
                        **scheduler) -> Comparison:
    """The joint law of scheduled requests against the product of each request's own law (prompt, budget)."""
    alone = [teacher_forced_law(target_model, torch.tensor([list(p)]), budget, sampling, eos_token_id)
             for p, budget in requests]
    return compare(scheduled_loop_law(target_model, proposer_factory, requests, max_batch, sampling, eos_token_id,
                                      **scheduler), product_law(alone))
