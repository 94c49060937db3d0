"""The harness on real Hugging Face models, through the real loop (docs/design.md section 7).

- exact_loop_law: the enumerating source drives the whole Decoder (HFTarget, the proposer,
  the verifier) over a batch of worlds: the exact law of the first D tokens of a tiny model.
- teacher_forced_law: the target's own law of the first D tokens, by forwarding prefixes;
  prefixes below min_prob are lumped into OTHER.
- sample_first_tokens + statistical_check: a G-test of N sampled runs against that law;
  one prefill is shared by all samples (the caches are expanded to the batch).
- greedy_identity: token-for-token equality with plain greedy decoding.
"""

from __future__ import annotations

import copy
from collections import Counter
from dataclasses import dataclass
from typing import Callable

import torch

from engine.loop import DecodeOptions, Decoder, generate
from framework.core.randomness import TorchSource
from framework.core.sampling import SamplingConfig
from framework.lm.target import HFTarget
from harness.enumerate import enumerate_law
from harness.reference import own_attention_copy, reference_law
from harness.stats import GTest, g_test
from verifiers import LOSSLESS, Verifier

OTHER = ("other",)
ProposerFactory = Callable[[], object] | None


def _first_tokens(rows: list[list[int]], depth: int, eos_token_id: int | None) -> list[tuple[int, ...]]:
    out = []
    for row in rows:
        row = row[:depth]
        if eos_token_id is not None and eos_token_id in row:
            row = row[: row.index(eos_token_id) + 1]
        out.append(tuple(row))
    return out


def run_first_tokens(
    decoder: Decoder, prompt: torch.Tensor, batch: int, depth: int, expand: bool, on_finished=None
) -> list[tuple[int, ...]]:
    """Decode until every row has `depth` tokens (or an EOS); the first `depth` tokens per row.

    on_finished(rows) hears which rows are settled after each step (the enumerator retires them).
    """
    roots = decoder.prefill(prompt, copies=batch) if expand else decoder.prefill(prompt.expand(batch, -1))
    rows = [[t] for t in roots.tolist()]
    eos = decoder.eos_token_id

    def finished(row):
        return len(row) >= depth or (eos is not None and eos in row)

    while not all(finished(r) for r in rows):
        if on_finished is not None:
            on_finished([i for i, r in enumerate(rows) if finished(r)])
        for row, emitted in zip(rows, decoder.step().tolist()):
            row.extend(t for t in emitted if t >= 0)
    return _first_tokens(rows, depth, eos)


def exact_loop_law(
    target_model,
    proposer_factory: ProposerFactory,
    prompt: torch.Tensor,
    depth: int,
    sampling: SamplingConfig,
    eos_token_id: int | None = None,
    verifier: Verifier = LOSSLESS,
    batch_size: int = 1024,
    target_factory: Callable = HFTarget,
    decoder_type: type[Decoder] = Decoder,
    policy_factory: Callable | None = None,
    constraint_factory: Callable | None = None,
) -> dict[tuple[int, ...], float]:
    """Exact law of the first `depth` tokens emitted by the real loop (enumerating every coin).

    Worlds run side by side as batch rows and are replayed in other batches, so each world must be
    a function of its own coins. A proposer whose tree shape couples the rows (`couples_rows`: one
    shape chosen from every row's draft values) is still exact per row, but its worlds run one at a time;
    so do a policy's (it sizes one tree for the batch), each world with a policy of its own.
    """
    if policy_factory is not None or (proposer_factory is not None
                                      and getattr(proposer_factory(), "couples_rows", False)):
        batch_size = 1

    def run(rng) -> list[tuple[int, ...]]:
        proposer = proposer_factory() if proposer_factory else None
        policy = policy_factory() if policy_factory else None
        constraint = constraint_factory() if constraint_factory else None
        decoder = decoder_type(target_factory(target_model), proposer, sampling, rng,
                               DecodeOptions(verifier, policy, constraint, eos_token_id))
        return run_first_tokens(decoder, prompt, rng.batch_size, depth, expand=False, on_finished=rng.retire)

    return enumerate_law(run, batch_size)


@torch.no_grad()
def _prompt_cache(model, prompt: torch.Tensor):
    """Plain HF cache of prompt[:, :-1] (None for a one-token prompt): HF's own code, not ours."""
    if prompt.shape[1] < 2:
        return None
    return model(prompt[:, :-1], use_cache=True).cache


def _expanded(cache, rows: int):
    """The prompt's cache repeated for `rows` prefixes, each layer of its own kind (a sliding layer keeps its
    window)."""
    if cache is None:
        return None
    repeated = copy.deepcopy(cache)
    repeated.batch_repeat_interleave(rows)
    return repeated


@torch.no_grad()
def teacher_forced_law(
    model, prompt: torch.Tensor, depth: int, sampling: SamplingConfig,
    eos_token_id: int | None = None, min_prob: float = 0.0, chunk: int = 256,
    allowed_next: Callable[[tuple[int, ...]], list[int]] | None = None,
) -> dict[tuple, float]:
    """The target's law of its first `depth` tokens; prefixes under min_prob go to OTHER.

    Independent of the code under test (harness/reference.py): plain HF forwards of each prefix
    on a copy of the model that runs transformers' own (SDPA) attention (the prompt's cache computed once by HF
    and copied per chunk of `chunk` prefixes), the law from transformers' own logits processors; no tree
    attention, no framework.core.sampling, no verifier. allowed_next(emitted tokens) -> the tokens a constraint
    allows next: a rule of the reference's own, through transformers' prefix-constrained processor.
    """
    model = own_attention_copy(model)
    law: dict[tuple, float] = {OTHER: 0.0}
    frontier = {(): 1.0}
    device = next(model.parameters()).device
    prompt = prompt.to(device)
    cache, start_position = _prompt_cache(model, prompt), prompt.shape[1] - 1
    rule = None if allowed_next is None else lambda row, ids: allowed_next(tuple(ids[prompt.shape[1]:].tolist()))
    for level in range(depth):
        prefixes = list(frontier)
        nxt: dict[tuple, float] = {}
        for first in range(0, len(prefixes), chunk):
            part = prefixes[first : first + chunk]
            tail = torch.tensor(part, dtype=torch.long, device=device).reshape(len(part), level)  # [b, level]
            ids = torch.cat([prompt[:, -1:].expand(len(part), 1), tail], 1)  # [b, level + 1]
            positions = torch.arange(start_position, start_position + level + 1, device=device).expand(len(part), -1)
            logits = model(ids, cache=_expanded(cache, len(part)), position_ids=positions).logits[:, -1].double()
            sequences = torch.cat([prompt.expand(len(part), -1), tail], 1)  # the penalty's history
            mass = torch.tensor([frontier[x] for x in part], dtype=torch.float64, device=device)[:, None] \
                * reference_law(logits, sampling, sequences, rule)  # [b, V]
            kept = mass >= max(min_prob, 1e-300)  # zero mass is no outcome at all
            law[OTHER] += float(mass[~kept].sum())
            for (row, token), prob in zip(torch.nonzero(kept).tolist(), mass[kept].tolist()):
                (law if token == eos_token_id else nxt)[part[row] + (token,)] = prob
        frontier = nxt
        if not frontier:
            break
    law.update(frontier)
    if law[OTHER] == 0.0:
        del law[OTHER]
    return law


def sample_first_tokens(
    target_model, proposer_factory: ProposerFactory, prompt: torch.Tensor, depth: int,
    sampling: SamplingConfig, n: int, batch: int = 2048, seed: int = 0,
    eos_token_id: int | None = None, verifier: Verifier = LOSSLESS,
) -> Counter:
    """Counts of the first `depth` tokens over n independent runs, `batch` at a time."""
    rng = TorchSource(seed=seed)
    counts: Counter = Counter()
    while sum(counts.values()) < n:
        b = min(batch, n - sum(counts.values()))
        proposer = proposer_factory() if proposer_factory else None
        decoder = Decoder(HFTarget(target_model), proposer, sampling, rng,
                          DecodeOptions(verifier, eos_token_id=eos_token_id))
        counts.update(run_first_tokens(decoder, prompt, b, depth, expand=True))
    return counts


def lump(counts: Counter, law: dict[tuple, float]) -> Counter:
    """Outcomes the law lumped into OTHER are counted there too."""
    out: Counter = Counter()
    for outcome, c in counts.items():
        out[outcome if outcome in law else OTHER] += c
    return out


@dataclass
class StatisticalResult:
    test: GTest
    n: int

    def passes(self, alpha: float = 1e-3) -> bool:
        return self.test.passes(alpha)


def statistical_check(
    target_model, proposer_factory: ProposerFactory, prompt: torch.Tensor, sampling: SamplingConfig,
    n: int, depth: int = 3, seed: int = 0, batch: int = 2048, min_prob: float = 1e-7,
    eos_token_id: int | None = None, verifier: Verifier = LOSSLESS, law: dict[tuple, float] | None = None,
) -> StatisticalResult:
    """G-test of n sampled runs; `law` (from teacher_forced_law) may be passed in to reuse it."""
    if law is None:
        law = teacher_forced_law(target_model, prompt, depth, sampling, eos_token_id, min_prob)
    counts = sample_first_tokens(target_model, proposer_factory, prompt, depth, sampling, n, batch, seed, eos_token_id,
                                 verifier)
    return StatisticalResult(g_test(lump(counts, law), law), n)


@dataclass
class GreedyReport:
    equal: bool
    first_difference: int | None  # index of the first differing new token
    baseline: list[int]
    speculative: list[int]


def greedy_identity(
    target_model, proposer_factory: ProposerFactory, prompt: torch.Tensor, max_new_tokens: int,
    eos_token_id: int | None = None, verifier: Verifier = LOSSLESS, policy=None,
) -> GreedyReport:
    greedy = SamplingConfig(temperature=0)
    base = generate(HFTarget(target_model), None, prompt, max_new_tokens, greedy,
                    options=DecodeOptions(eos_token_id=eos_token_id)).tokens[0].tolist()
    spec = generate(HFTarget(target_model), proposer_factory(), prompt, max_new_tokens, greedy,
                    options=DecodeOptions(eos_token_id=eos_token_id, verifier=verifier,
                                          policy=policy)).tokens[0].tolist()
    diff = next((i for i, (a, b) in enumerate(zip(base, spec)) if a != b), None)
    return GreedyReport(base == spec, diff, base, spec)
