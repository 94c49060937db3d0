"""Exact mode of the harness: the law of the first D emitted tokens, computed, not sampled.

A minimal speculative loop over toy models: the draft proposes a tree (drawing through the
random source), the target's laws are processed along each node's own path, the real
verifier accepts a path, the accepted tokens are committed, repeat. Every coin goes through
the enumerating source, so the law of one step is exact; steps compose because the next step
depends only on the committed context. The result is compared with the target's own law.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch

from framework.core.drafting import draw_children
from framework.core.sampling import SamplingConfig, process_logits, seen_along_tree, seen_tokens
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape
from harness.enumerate import EnumeratingSource, enumerate_law
from harness.reference import reference_law
from harness.toy import ToyLM
from verifiers import LOSSLESS, Verifier, verify

Law = dict[tuple[int, ...], float]


@dataclass(frozen=True)
class ExactCase:
    name: str
    target: ToyLM
    draft: ToyLM
    shape: TreeShape
    kind: str
    sampling: SamplingConfig = SamplingConfig()
    draft_sampling: SamplingConfig | None = None  # None: the draft samples like the target
    prompt: tuple[int, ...] = (1,)
    depth: int = 3  # D: how many emitted tokens the law covers
    eos_token_id: int | None = None
    tier: str = "default"  # which test run takes it under a rule (harness.cases.TIERS)


def reported_as_drawn(logits, cfg, seen, q):
    return q


@dataclass(frozen=True)
class Pipeline:
    """The parts of one speculative step; the mutation suite swaps exactly one of them."""

    verifier: Verifier = LOSSLESS
    target_law: Callable = process_logits  # (logits, cfg, seen) -> p
    draft_law: Callable = process_logits  # (logits, cfg, seen) -> q the draft draws from
    reported_q: Callable = reported_as_drawn  # (logits, cfg, seen, q) -> q given to the verifier
    draw: Callable = draw_children  # (q, k, kind, rng) -> children


def _seen(cfg: SamplingConfig, context: torch.Tensor, vocab: int):
    return seen_tokens(context, vocab) if cfg.uses_history else None


def propose(case: ExactCase, pipeline: Pipeline, context: torch.Tensor, rng) -> CandidateTree:
    """Fill the case's tree shape row by row: each node's children drawn from its own q."""
    cfg = case.draft_sampling or case.sampling
    B, N, V = context.shape[0], case.shape.num_nodes, case.draft.vocab
    parents, ranks = case.shape.parents.tolist(), case.shape.ranks.tolist()
    tokens = torch.zeros(B, N, dtype=torch.long)
    q_rows = []
    for row in range(N + 1):
        path = [row - 1] if row else []
        while path and parents[path[-1]] >= 0:
            path.append(parents[path[-1]])
        sequence = torch.cat([context, tokens[:, path[::-1]]], dim=1)
        logits = case.draft.logits(sequence)
        seen = _seen(cfg, sequence, V)
        q = pipeline.draft_law(logits, cfg, seen)
        kids = [i for i in range(N) if parents[i] == row - 1]
        if kids:
            drawn = pipeline.draw(q, max(ranks[i] for i in kids) + 1, case.kind, rng)
            for i in kids:
                tokens[:, i] = drawn[:, ranks[i]]
        q_rows.append(pipeline.reported_q(logits, cfg, seen, q))
    # point trees carry their q too, as an engine's may: every rule must judge them as point masses
    return CandidateTree(tokens, case.shape.parents, torch.stack(q_rows, dim=1), case.kind)


def step_tokens(case: ExactCase, pipeline: Pipeline, context: tuple[int, ...], rng: EnumeratingSource):
    """One speculative step for every world of the source; emitted tokens per world."""
    ctx = torch.tensor([context], dtype=torch.long).expand(rng.batch_size, -1)
    tree = propose(case, pipeline, ctx, rng)
    logits = case.target.tree_logits(ctx, tree.tokens, tree.parents)
    seen = seen_along_tree(seen_tokens(ctx, case.target.vocab), tree.tokens, tree.shape) \
        if case.sampling.uses_history else None
    p = pipeline.target_law(logits, case.sampling, seen)
    result = verify(tree, p, rng=rng, eos_token_id=case.eos_token_id, verifier=pipeline.verifier)
    return [tuple(t for t in row if t >= 0) for row in result.tokens.tolist()]


def _finished(case: ExactCase, emitted: tuple[int, ...]) -> bool:
    return len(emitted) >= case.depth or (case.eos_token_id is not None and case.eos_token_id in emitted)


def speculative_law(case: ExactCase, pipeline: Pipeline = Pipeline()) -> Law:
    """Exact law of the first D tokens the speculative loop emits (shorter if EOS came first)."""
    step_laws: dict[tuple[int, ...], Law] = {}
    law: Law = {}

    def grow(emitted: tuple[int, ...], weight: float) -> None:
        if _finished(case, emitted):
            key = emitted[: case.depth]
            law[key] = law.get(key, 0.0) + weight
            return
        context = case.prompt + emitted
        if context not in step_laws:
            step_laws[context] = enumerate_law(lambda rng: step_tokens(case, pipeline, context, rng))
        for tokens, w in step_laws[context].items():
            grow(emitted + tokens, weight * w)

    grow((), 1.0)
    return law


def target_law(case: ExactCase) -> Law:
    """Exact law of the first D tokens of plain sampling from the target, by transformers' own logits
    processors (harness/reference.py), not by the framework.core.sampling the loop uses."""
    law: Law = {}

    def grow(emitted: tuple[int, ...], weight: float) -> None:
        if _finished(case, emitted):
            law[emitted] = law.get(emitted, 0.0) + weight
            return
        ctx = torch.tensor([case.prompt + emitted], dtype=torch.long)
        p = reference_law(case.target.logits(ctx), case.sampling, ctx)[0]
        for token in torch.nonzero(p > 0).flatten().tolist():
            grow(emitted + (token,), weight * float(p[token]))

    grow((), 1.0)
    return law


@dataclass
class Comparison:
    tv: float  # total variation between the two laws
    support_violations: list[tuple[int, ...]] = field(default_factory=list)  # emitted, but impossible
    mass: float = 1.0  # total mass of the speculative law (1 up to rounding)

    def passes(self, tol: float = 1e-9) -> bool:
        return self.tv <= tol and not self.support_violations and abs(self.mass - 1) <= tol


def compare(spec: Law, target: Law) -> Comparison:
    keys = set(spec) | set(target)
    tv = 0.5 * sum(abs(spec.get(k, 0.0) - target.get(k, 0.0)) for k in keys)
    impossible = sorted(k for k, w in spec.items() if w > 0 and target.get(k, 0.0) == 0.0)
    return Comparison(tv, impossible, sum(spec.values()))


def check_case(case: ExactCase, pipeline: Pipeline = Pipeline()) -> Comparison:
    return compare(speculative_law(case, pipeline), target_law(case))
