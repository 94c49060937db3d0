"""Continuous batching: requests arrive, are admitted into free rows of the running batch, and leave when done.

Each admission prefills the newcomers (prompts of any lengths, in one forward) with a fresh proposer of the same
configuration, then joins them to the running batch (`Decoder.join`): from the next step they decode together, and
each request decodes as it would alone (the same coins per row, its own positions and context). A request leaves at
its EOS or its own budget; a cancelled one leaves at once. Up to `max_batch` requests decode at a time (the
concurrency cap); the rest wait in arrival order. Times are read from one clock: arrival, admission, first token
(the prefill's), end; every step's composition is logged (rows decoding, newcomers and their prompt tokens, nodes).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Hashable, Protocol, Sequence

import torch

from engine.loop import DecodeOptions, Decoder, check_prompt
from framework.core.policy import FixedPolicy, Policy
from framework.core.prompts import ragged_batch
from framework.core.randomness import RandomSource, TorchSource
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from verifiers import LOSSLESS, Verifier


@dataclass
class Request:
    prompt: Sequence[int]  # token ids
    max_new_tokens: int
    arrival_s: float = 0.0  # seconds after the run starts
    id: Hashable = None  # None: its position in the submission order


@dataclass
class Finished:
    """A request's tokens and times (seconds after the run started)."""

    id: Hashable
    tokens: list[int]
    arrival_s: float
    admitted_s: float | None = None
    first_token_s: float | None = None
    end_s: float | None = None
    cancelled: bool = False

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_s is None else self.first_token_s - self.arrival_s

    @property
    def tpot_s(self) -> float | None:
        """Seconds per output token after the first."""
        if self.end_s is None or self.first_token_s is None or len(self.tokens) < 2:
            return None
        return (self.end_s - self.first_token_s) / (len(self.tokens) - 1)

    @property
    def latency_s(self) -> float | None:
        return None if self.end_s is None else self.end_s - self.arrival_s


@dataclass
class StepRecord:
    """What one scheduler step held: the batch's rows and what joined it, and how long it took."""

    start_s: float
    decoding: int  # rows that took a decoding step
    admitted: int = 0  # requests prefilled and joined before it
    prefill_tokens: int = 0  # their prompts' tokens
    nodes: int = 0  # tree nodes verified
    seconds: float = 0.0


@dataclass
class _Live:
    request: Request
    result: Finished


class Scheduler:
    def __init__(self, target_model, proposer_factory: Callable | None, sampling: SamplingConfig = SamplingConfig(),
                 max_batch: int = 8, seed: int | None = None, rng: RandomSource | None = None,
                 eos_token_id: int | None = None, verifier: Verifier = LOSSLESS, policy: Policy | None = None,
                 target_factory: Callable = HFTarget, constraint_factory: Callable | None = None,
                 clock: Callable[[], float] = time.perf_counter, sleep: Callable[[float], None] = time.sleep,
                 on_step: Callable[[Scheduler], None] | None = None):
        """proposer_factory: a fresh proposer per admission (None: plain decoding); max_batch: the concurrency cap;
        policy: the batch's speculation policy (it hears of every admission); clock/sleep: time, replaceable;
        on_step: called after every step (to stream tokens, or cancel requests)."""
        if isinstance(max_batch, bool) or not isinstance(max_batch, int) or max_batch < 1:
            raise ValueError(f"max_batch must be an integer >= 1, got {max_batch!r}")
        self.model, self.proposer_factory, self.sampling, self.max_batch = (target_model, proposer_factory, sampling,
                                                                            max_batch)
        self.rng = rng or TorchSource(seed=seed)
        self.eos_token_id, self.verifier, self.policy = eos_token_id, verifier, policy or FixedPolicy()
        self.target_factory, self.constraint_factory = target_factory, constraint_factory
        self.clock, self.sleep, self.on_step = clock, sleep, on_step
        self.checker = target_factory(target_model)  # reads the model's vocabulary and context for submit's checks
        self.queue: list[Request] = []
        self.known: set = set()
        self.live: list[_Live] = []  # in the decoder's row order
        self.finished: list[Finished] = []
        self.steps: list[StepRecord] = []
        self.engine_steps: list = []  # the decoder's own record of each step (engine.loop.StepStats), in order
        self.decoder: Decoder | None = None
        self.cancelled: set = set()
        self.start = None

    def submit(self, request: Request) -> None:
        if request.id is None:
            request.id = len(self.known)
        if request.id in self.known:
            raise ValueError(f"request {request.id!r} was already submitted: give each request an id of its own")
        if not isinstance(request.arrival_s, (int, float)) or request.arrival_s < 0:
            raise ValueError(f"request {request.id!r}: arrival_s must be a time >= 0, got {request.arrival_s!r}")
        prompt = check_prompt(self.checker, [request.prompt], request.max_new_tokens)  # named now, not mid-run
        request.prompt = prompt[0].tolist()
        self.known.add(request.id)
        self.queue.append(request)
        self.queue.sort(key=lambda r: r.arrival_s)  # stable: submission order among equal arrivals

    def cancel(self, request_id: Hashable) -> None:
        """The request leaves at once (before its next step): queued, it never starts; decoding, its row leaves."""
        if request_id not in self.known:
            raise ValueError(f"no request {request_id!r} was submitted")
        self.cancelled.add(request_id)

    def now(self) -> float:
        return self.clock() - self.start

    def run(self, requests: Sequence[Request] = ()) -> list[Finished]:
        """Decode every submitted request (and these); returns them finished, in submission order."""
        for request in requests:
            self.submit(request)
        self.start = self.clock()
        order = [r.id for r in self.queue]
        while self.queue or self.live:
            self.drop_cancelled()
            admitted, tokens = self.admit()
            self.leave()
            if not self.live:
                if self.queue:
                    self.sleep(max(0.0, self.queue[0].arrival_s - self.now()))
                continue
            self.step(admitted, tokens)
            self.leave()
            if self.on_step is not None:
                self.on_step(self)
        by_id = {f.id: f for f in self.finished}
        return [by_id[i] for i in order if i in by_id]

    def drop_cancelled(self) -> None:
        for request in [r for r in self.queue if r.id in self.cancelled]:
            self.queue.remove(request)
            self.finished.append(Finished(request.id, [], request.arrival_s, cancelled=True, end_s=self.now()))
        for live in self.live:
            if live.request.id in self.cancelled:
                live.result.cancelled = True
        self.leave()

    def admit(self) -> tuple[int, int]:
        """Prefill the requests that have arrived, as many as there are free rows, and join them to the batch."""
        now = self.now()
        arrived = [r for r in self.queue if r.arrival_s <= now][: self.max_batch - len(self.live)]
        if not arrived:
            return 0, 0
        for request in arrived:
            self.queue.remove(request)
        admitted_s = self.now()
        options = DecodeOptions(self.verifier, self.policy if self.decoder is None else FixedPolicy(),
                                self.constraint_factory() if self.constraint_factory else None, self.eos_token_id)
        newcomers = Decoder(self.target_factory(self.model), self.proposer_factory() if self.proposer_factory else None,
                            self.sampling, self.rng, options)
        roots = newcomers.prefill(ragged_batch([r.prompt for r in arrived])).cpu()  # checked at submission
        if self.decoder is None:
            self.decoder = newcomers
        else:
            self.decoder.join(newcomers)
        first = self.now()
        for request, root in zip(arrived, roots.tolist()):
            live = _Live(request, Finished(request.id, [], request.arrival_s, admitted_s, first))
            self.live.append(live)
            self.emit(live, [root])
        return len(arrived), sum(len(r.prompt) for r in arrived)

    def emit(self, live: _Live, tokens: list[int]) -> int:
        """Keep a row's new tokens up to its EOS or budget; returns how many were kept."""
        kept = 0
        for token in tokens:
            if token < 0 or self.done(live):
                break
            live.result.tokens.append(token)
            kept += 1
        if self.done(live) and live.result.end_s is None:
            live.result.end_s = self.now()
        return kept

    def done(self, live: _Live) -> bool:
        tokens = live.result.tokens
        return live.result.cancelled or len(tokens) >= live.request.max_new_tokens or \
            (bool(tokens) and self.eos_token_id is not None and tokens[-1] == self.eos_token_id)

    def leave(self) -> None:
        """Finished and cancelled rows leave the batch."""
        if not any(self.done(live) for live in self.live):
            return
        keep = [i for i, live in enumerate(self.live) if not self.done(live)]
        for live in self.live:
            if self.done(live):
                live.result.end_s = live.result.end_s if live.result.end_s is not None else self.now()
                self.finished.append(live.result)
        self.live = [self.live[i] for i in keep]
        if not keep:
            self.decoder = None  # the next admission starts a fresh batch
            return
        self.decoder.select(torch.tensor(keep))

    def step(self, admitted: int, prefill_tokens: int) -> None:
        start = self.now()
        wanted = max(live.request.max_new_tokens - len(live.result.tokens) for live in self.live) - 1
        emitted = self.decoder.step(wanted).cpu()
        kept = [self.emit(live, row) for live, row in zip(self.live, emitted.tolist())]
        self.decoder.stats.steps[-1].emitted = torch.tensor(kept)
        self.engine_steps.append(self.decoder.stats.steps[-1])
        self.steps.append(StepRecord(start, len(self.live), admitted, prefill_tokens,
                                     self.decoder.stats.steps[-1].nodes, self.now() - start))


class Arrivals(Protocol):
    def times(self, count: int) -> list[float]:
        """Arrival times (seconds after the run starts) of `count` requests, the first at 0."""
        ...


@dataclass
class AllAtOnce:
    def times(self, count: int) -> list[float]:
        return [0.0] * count


@dataclass
class FixedRate:
    rate: float  # requests per second

    def __post_init__(self) -> None:
        if not self.rate > 0:
            raise ValueError(f"an arrival rate must be > 0 requests per second, got {self.rate!r}")

    def times(self, count: int) -> list[float]:
        return [i / self.rate for i in range(count)]


@dataclass
class Poisson(FixedRate):
    seed: int = 0

    def times(self, count: int) -> list[float]:
        gaps = torch.empty(count, dtype=torch.float64).exponential_(self.rate,
                                                                    generator=torch.Generator().manual_seed(self.seed))
        return (gaps.cumsum(0) - gaps[0]).tolist()  # exponential gaps, the first request at 0
