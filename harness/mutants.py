"""Realistic bugs planted in one part of the pipeline each: the harness must catch every one.

Each mutant is the clean Pipeline with exactly one part replaced by a buggy twin.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from framework.core.drafting import draw_children
from framework.core.sampling import process_logits
from harness.exact import Pipeline
from harness.rule_mutants import (
    BlockKeepWithoutRest,
    BlockReadsQOnPointChains,
    BlockShortestFirst,
    BlockUnweightedResidual,
    SequentialResidualOfOneDraft,
    SequentialRhoOne,
    TraversalKeepsRejectedSubtree,
    TraversalUnweightedChildren,
    TraversalWorWithoutQUpdate,
)
from verifiers import LOSSLESS_RULES, NodeLaw, TreeVerifier
from verifiers.block import BlockVerifier
from verifiers.multidraft import multidraft_verifier
from verifiers.rules import IidRule, PointRule, WorRule, normalize_or_keep
from verifiers.traversal import TraversalVerifier


@dataclass(frozen=True)
class Mutant:
    name: str
    bug: str
    pipeline: Pipeline
    witness: str  # a cheap exact case known to catch it (the fast test); the full matrix runs under -m slow
    clean: Pipeline = Pipeline()  # the same pipeline without the bug: its own rule (block's bugs: block verification)
    where: str = "production"  # "harness": the bug sits in the exact matrix's own toy loop, not in code users run


def _rules(**kinds):
    return {**LOSSLESS_RULES, **kinds}


# ---- bugs in the rules ----------------------------------------------------------------------


class SiblingsTestedWithP(IidRule):
    """Later siblings are tested against the node's full p, not the renormalised residual."""

    def accept_probability(self, law, token):
        return super().accept_probability(NodeLaw(law.p, law.p, law.q), token)


class PointSiblingsTestedWithP(PointRule):
    def accept_probability(self, law, token):
        return law.p.gather(-1, token[:, None]).squeeze(-1)


class RejectedLeftInResidual(PointRule):
    """A rejected point child keeps its mass: it can come back as the recovered token."""

    def after_reject(self, law, token):
        return law


class IidRejectedLeftInResidual(IidRule):
    def after_reject(self, law, token):
        return law


class WorWithoutQUpdate(WorRule):
    """Without-replacement children verified as if q never lost the rejected ones."""

    def after_reject(self, law, token):
        return IidRule.after_reject(self, law, token)


class ResidualNotNormalised(IidRule):
    def after_reject(self, law, token):
        return replace(law, r=(law.r - law.q).clamp_min(0))


class PointResidualNotNormalised(PointRule):
    def after_reject(self, law, token):
        return replace(law, r=law.r.scatter(-1, token[:, None], 0.0))


class WorResidualNotNormalised(WorRule):
    def after_reject(self, law, token):
        q = normalize_or_keep(law.q.scatter(-1, token[:, None], 0.0), law.q)
        return replace(law, r=(law.r - law.q).clamp_min(0), q=q)


# ---- bugs in the walk -----------------------------------------------------------------------


class CoinReusedAcrossDepths(TreeVerifier):
    def coin(self, uniforms, level, slot):
        return uniforms[:, 0, slot]


class LessOrEqualCoin(TreeVerifier):
    """`u <= ratio`: a child with ratio 0 (p = 0) is accepted when the generator returns 0.0."""

    def accepts(self, u, ratio):
        return u <= ratio


class BonusFromResidual(TreeVerifier):
    """At a leaf, the bonus is drawn from norm(max(p - q, 0)) instead of the leaf's full p."""

    def final_law(self, law, at_leaf):
        if law.q is None:
            return law.r
        residual = normalize_or_keep((law.p - law.q).clamp_min(0), law.p)
        return torch.where(at_leaf[:, None], residual, law.r)


class IgnoresEos(TreeVerifier):
    """Keeps accepting, and adds a bonus, after an accepted EOS."""

    def __call__(self, tree, target_probs, rng, eos_token_id=None):
        return super().__call__(tree, target_probs, rng, None)


# ---- bugs in the pipeline around the verifier -----------------------------------------------


def raw_softmax(logits, cfg, seen=None, q=None):
    return torch.softmax(logits, dim=-1)


def target_without_temperature(logits, cfg, seen=None):
    return process_logits(logits, replace(cfg, temperature=1.0) if cfg.temperature > 0 else cfg, seen)


def draw_sorted_by_q(q, k, kind, rng):
    """iid children reordered by their q (most likely first) before verification."""
    drawn = draw_children(q, k, kind, rng)
    if kind != "iid":
        return drawn
    order = q.gather(-1, drawn).argsort(dim=-1, descending=True, stable=True)
    return drawn.gather(-1, order)


def draw_deduplicated(q, k, kind, rng):
    """iid duplicates replaced by the most likely tokens not drawn yet, still labelled iid."""
    drawn = draw_children(q, k, kind, rng)
    if kind != "iid":
        return drawn
    out = drawn.clone()
    for b in range(drawn.shape[0]):
        seen: list[int] = []
        spare = [t for t in q[b].argsort(descending=True, stable=True).tolist() if q[b, t] > 0]
        for j, t in enumerate(drawn[b].tolist()):
            if t in seen:
                t = next((s for s in spare if s not in seen and s not in drawn[b].tolist()), t)
            seen.append(t)
            out[b, j] = t
    return out


CLEAN = Pipeline()
BLOCK, TRAVERSAL, MULTIDRAFT = (Pipeline(verifier=v)
                                for v in (BlockVerifier(), TraversalVerifier(), multidraft_verifier()))
# the toy loop's drafting and target law; harness/loop_mutants.py plants their twins in production
HARNESS = "harness"


def mutants() -> list[Mutant]:
    m = Mutant
    return [
        m("raw-logits-q", "q taken from the draft's raw logits, not the law it sampled from",
          replace(CLEAN, reported_q=raw_softmax), "chain3/iid/topk2", where=HARNESS),
        m("raw-logits-p", "p taken from the target's raw logits, not the processed law",
          replace(CLEAN, target_law=raw_softmax), "chain3/point/greedy", where=HARNESS),
        m("temperature-on-q-not-p", "temperature applied to the draft's q but not the target's p",
          replace(CLEAN, target_law=target_without_temperature), "chain3/point/T0.7", where=HARNESS),
        m("bonus-from-residual", "bonus token drawn from the residual instead of the leaf's p",
          replace(CLEAN, verifier=BonusFromResidual()), "chain1/iid/T1"),
        m("siblings-with-p", "siblings accepted with p instead of the renormalised residual",
          replace(CLEAN, verifier=TreeVerifier(_rules(iid=SiblingsTestedWithP(),
                                                      point=PointSiblingsTestedWithP()))), "zeros-in-p/point/binary2"),
        m("rejected-left-in-residual", "rejected children left in the final residual",
          replace(CLEAN, verifier=TreeVerifier(_rules(point=RejectedLeftInResidual(),
                                                      iid=IidRejectedLeftInResidual()))), "chain3/point/topk2"),
        m("iid-deduplicated", "duplicate iid children dropped (replaced by unseen tokens)",
          replace(CLEAN, draw=draw_deduplicated), "binary2/iid/T1/V3", where=HARNESS),
        m("iid-sorted-by-q", "iid children sorted by q before verification",
          replace(CLEAN, draw=draw_sorted_by_q), "p==q/iid/binary2/V3", where=HARNESS),
        m("wor-no-q-update", "wor children verified without removing rejected ones from q",
          replace(CLEAN, verifier=TreeVerifier(_rules(wor=WorWithoutQUpdate()))), "medusa/wor/T1/V3"),
        m("coin-reused", "one coin reused across depths",
          replace(CLEAN, verifier=CoinReusedAcrossDepths()), "chain3/point/topp0.8"),
        m("u-le-ratio", "`u <= ratio` accepts a p = 0 token when u is exactly 0",
          replace(CLEAN, verifier=LessOrEqualCoin()), "chain3/point/greedy"),
        m("residual-not-normalised", "residual not renormalised after a rejection",
          replace(CLEAN, verifier=TreeVerifier(_rules(point=PointResidualNotNormalised(), iid=ResidualNotNormalised(),
                                                      wor=WorResidualNotNormalised()))), "zeros-in-p/point/binary2"),
        m("bonus-after-eos", "tokens emitted after an accepted EOS",
          replace(CLEAN, verifier=IgnoresEos()), "eos/point/chain3"),
        m("block-unweighted-residual", "block verification's residual without its weight (the token rule's)",
          replace(CLEAN, verifier=BlockUnweightedResidual()), "chain3/iid/T1", clean=BLOCK),
        m("block-keep-without-rest", "block verification's keep-probability without its 1 - w_i term",
          replace(CLEAN, verifier=BlockKeepWithoutRest()), "chain3/iid/T1", clean=BLOCK),
        m("block-shortest-first", "block verification taking the shortest prefix under its coin, not the longest",
          replace(CLEAN, verifier=BlockShortestFirst()), "chain3/iid/T1", clean=BLOCK),
        m("block-reads-q-on-point-chains", "block verification judging a point chain by the q it carries",
          replace(CLEAN, verifier=BlockReadsQOnPointChains()), "chain3/point/T1", clean=BLOCK),
        m("traversal-keeps-rejected-subtree", "traversal verification leaving a deleted subtree's mass in its parent",
          replace(CLEAN, verifier=TraversalKeepsRejectedSubtree()), "chain3/iid/T1", clean=TRAVERSAL),
        m("traversal-unweighted-residual", "traversal verification's residual without the parent's weight",
          replace(CLEAN, verifier=TraversalUnweightedChildren()), "chain3/iid/T1", clean=TRAVERSAL),
        m("traversal-wor-no-q-update",
          "traversal verification's wor siblings judged without removing deleted ones from q",
          replace(CLEAN, verifier=TraversalWorWithoutQUpdate()), "cover-support/wor/root4", clean=TRAVERSAL),
        m("multidraft-rho-one", "k-sequential selection with rho = 1 for every k (an infeasible residual)",
          replace(CLEAN, verifier=TreeVerifier(_rules(iid=SequentialRhoOne()))), "duplicates/iid/root4",
          clean=MULTIDRAFT),
        m("multidraft-residual-of-one-draft", "k-sequential selection's residual as if one draft had been tried",
          replace(CLEAN, verifier=TreeVerifier(_rules(iid=SequentialResidualOfOneDraft()))), "duplicates/iid/root4",
          clean=MULTIDRAFT),
    ]
