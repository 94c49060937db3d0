"""Bugs planted in the production code of the loop, caught by the exact law through the real loop.

Each mutant plants one realistic mistake in the code users run (the target adapter, the tree attention,
the sampling law, the draft model's drafting, the decoder's target laws, the path a rule hands to the KV
commit) and names a witness: a small exact case of the real loop on the vocabulary-3 toy target, whose
law is compared with the reference of harness/reference.py (transformers' own attention and
logits processors). The clean code passes the witness (TV <= 1e-9), the planted bug must not (TV > 1e-6).
`python -m experiments.mutants` runs them after the exact matrix's mutants.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field, fields, replace

import torch

from engine.loop import Decoder
from framework.control.goodput import GoodputPolicy
from framework.core import sampling
from framework.core.sampling import SamplingConfig
from framework.core.target import TargetOutput
from framework.lm import tree_attention
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.exact import compare
from harness.mutants import draw_deduplicated, draw_sorted_by_q, raw_softmax, target_without_temperature
from harness.real import exact_loop_law, teacher_forced_law
from harness.toy_grammar import A_THEN_B, PAIRS, ToyGrammar
from harness.toy_vocabularies import toy_vocabulary
from proposers import CrossVocabularyProposer, DraftModelProposer, LookaheadProposer, MedusaProposer
from proposers.common import position_tree
from proposers.common.position_tree import position_law_tree as clean_position_law_tree
from proposers.medusa.heads import random_heads
from verifiers import LOSSLESS, TreeVerifier
from verifiers.block import BlockVerifier
from verifiers.traversal import TraversalVerifier

TOY = dict(hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1, dtype="float64", init_std=0.3)
T07_TOPP09 = SamplingConfig(temperature=0.7, top_p=0.9)  # the order of the two changes the kept set here


@contextmanager
def planted(owner, name: str, replacement) -> Iterator[None]:
    """`owner.name` replaced by `replacement` wherever the code under test holds it (modules that imported
    the name too), for the duration of the block; the replacement's own module keeps the original."""
    original = getattr(owner, name)
    spared = (owner, sys.modules.get(replacement.__module__))
    holders = [(owner, name)] + [(module, attr) for module in list(sys.modules.values()) if module not in spared
                                 for attr, value in list(vars(module).items()) if value is original]
    for holder, attr in holders:
        setattr(holder, attr, replacement)
    try:
        yield
    finally:
        for holder, attr in holders:
            setattr(holder, attr, original)


@dataclass(frozen=True)
class LoopCase:
    """One exact case of the real loop on the toy target (draft: the toy draft with `proposer` settings)."""

    proposer: dict | None = None  # DraftModelProposer settings; None: `proposer_factory`
    sampling: SamplingConfig = SamplingConfig()
    depth: int = 3
    prompt: tuple[int, ...] = (1, 2, 0)
    verifier: object = LOSSLESS
    proposer_factory: Callable | None = field(default=None, compare=False)
    vocab: int = 3  # 2 makes wor siblings exhaust the support: deep wor trees enumerate in a second
    policy_factory: Callable | None = field(default=None, compare=False)  # a speculation policy per world (None: fixed)
    # the output follows it: the loop through the grammar engine, the reference by hand
    grammar: ToyGrammar | None = None
    # a draft of another vocabulary: () -> VocabularyMap
    vocabulary: Callable | None = field(default=None, compare=False)

    def describe(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.proposer.items()) if self.proposer else "a proposer factory"
        settings += f", grammar {self.grammar.regex}" if self.grammar is not None else ""
        settings += ", a draft of another vocabulary" if self.vocabulary is not None else ""
        default = SamplingConfig()
        sampled = "".join(f", {f.name}={getattr(self.sampling, f.name)}" for f in fields(SamplingConfig)
                          if getattr(self.sampling, f.name) != getattr(default, f.name))
        return f"{type(self.verifier).__name__}, {settings}{sampled}, D = {self.depth}"

    def tv(self, target_factory=HFTarget, decoder_type=Decoder, proposer_type=DraftModelProposer,
           verifier=None) -> float:
        prompt = torch.tensor([[t % self.vocab for t in self.prompt]])
        vocabulary = None if self.vocabulary is None else self.vocabulary()
        target = tiny_random_model("llama", seed=0, vocab_size=self.vocab, **TOY)
        draft = tiny_random_model("llama", seed=1, vocab_size=vocabulary.draft_size if vocabulary else self.vocab,
                                  **TOY)
        if vocabulary is not None:  # the draft proposes through the map (a mutant's class, or the clean one)
            cross = proposer_type if issubclass(proposer_type, CrossVocabularyProposer) else CrossVocabularyProposer
            factory = self.proposer_factory or (lambda: cross(draft, vocabulary, **self.proposer))
        else:
            factory = self.proposer_factory or (lambda: proposer_type(draft, **self.proposer))
        grammar = self.grammar
        spec = exact_loop_law(target, factory, prompt, self.depth, self.sampling, verifier=verifier or self.verifier,
                              target_factory=target_factory, decoder_type=decoder_type,
                              policy_factory=self.policy_factory,
                              constraint_factory=None if grammar is None else grammar.constraint)
        reference = teacher_forced_law(target, prompt, self.depth, self.sampling,
                                       allowed_next=None if grammar is None else grammar.allowed_next)
        return compare(spec, reference).tv


@dataclass(frozen=True)
class LoopMutant:
    name: str
    bug: str
    witness: LoopCase
    target: type = HFTarget
    decoder: type = Decoder
    proposer: type = DraftModelProposer
    verifier: object = None  # the rule with the bug, judged against the witness's own clean rule
    plant: Callable = nullcontext  # () -> a context in which production code holds the bug
    where: str = "production"
    policy: Callable | None = None  # a speculation policy with the bug, in place of the witness's own

    def tvs(self) -> tuple[float, float]:
        """(TV of the clean code on the witness, TV with the bug planted). A bug that makes the loop emit a token
        its grammar forbids is stopped by the constraint's own check at the commit: the loop raises, which counts
        as caught (TV infinite), never as a pass."""
        clean = self.witness.tv()
        with self.plant():
            witness = self.witness if self.policy is None else replace(self.witness, policy_factory=self.policy)
            try:
                buggy = witness.tv(self.target, self.decoder, self.proposer, self.verifier)
            except ValueError as error:
                if "the grammar forbids" not in str(error):
                    raise
                buggy = float("inf")
        return clean, buggy


CLEAN_AT_MOST, CAUGHT_ABOVE = 1e-9, 1e-6  # a witness's TV: the clean code's, and what counts as the bug caught


# ---- the target adapter -----------------------------------------------------------------------


class WrongPositions(HFTarget):
    """Tree rows numbered as a chain (past + row index) instead of past + depth."""

    def forward_tree(self, root, tree, side=None, speculating=None):
        tokens = torch.cat([root[:, None], tree.tokens], dim=1)
        out = self.lm.forward(tokens, torch.arange(tree.num_nodes + 1), tree.ancestor_mask())
        return TargetOutput(out.logits, out.hidden)


class CropInsteadOfGather(HFTarget):
    """Commit keeps the first accepted-count tree slots (a scalar rewind) instead of the path."""

    def commit(self, result):
        slots = torch.arange(result.path.shape[1] + 1).expand(result.path.shape[0], -1)
        self.lm.keep(slots, result.num_accepted + 1)


class SideRowsKeptAtCommit(HFTarget):
    """The side rows' KV (lookahead's window) is committed after the accepted path, as if it were
    text: later tokens attend to guesses at positions that are not theirs."""

    def forward_tree(self, root, tree, side=None, speculating=None):
        self.side_count, self.tree_rows = (0 if side is None else side.num_rows), tree.num_nodes + 1
        return super().forward_tree(root, tree, side, speculating)

    def commit(self, result) -> None:
        B, S = result.path.shape[0], self.side_count
        slots = torch.zeros(B, result.path.shape[1] + 1 + S, dtype=torch.long)
        for b, count in enumerate(result.num_accepted.tolist()):
            row = [0] + [p + 1 for p in result.path[b, :count].tolist()] \
                + list(range(self.tree_rows, self.tree_rows + S))
            slots[b, : len(row)] = torch.tensor(row)
        self.lm.keep(slots, result.num_accepted + 1 + S)


# ---- attention and the sampling law -----------------------------------------------------------


def wrong_attention_scale():
    """Every tree-attention backend scales its scores by 1.3 / sqrt(d) instead of 1 / sqrt(d)."""
    backends = dict(tree_attention.BACKENDS)
    scaled = {name: (lambda f: lambda q, k, v, mask, scale, *layer: f(q, k, v, mask, scale * 1.3, *layer))(f)
              for name, f in backends.items()}

    @contextmanager
    def context():
        tree_attention.BACKENDS.update(scaled)
        try:
            yield
        finally:
            tree_attention.BACKENDS.update(backends)

    return context()


def top_p_before_temperature(logits, cfg, seen=None, allowed=None):
    """The nucleus taken on the untempered law, the temperature applied after (transformers: the other way)."""
    if cfg.greedy or cfg.top_p >= 1:
        return ORIGINAL_PROCESS_LOGITS(logits, cfg, seen, allowed)
    keep = sampling._keep_top_p(torch.softmax(logits.double(), -1), cfg.top_p)
    cut = logits.masked_fill(~keep, float("-inf"))
    return ORIGINAL_PROCESS_LOGITS(cut, replace(cfg, top_p=1.0), seen, allowed)


ORIGINAL_PROCESS_LOGITS = sampling.process_logits  # this module keeps it while the bug is planted


# ---- the draft model's drafting and the decoder's target laws ---------------------------------


class ReportsRawQ(DraftModelProposer):
    def reported_law(self, law, logits, cfg, seen):
        return torch.softmax(logits.double(), -1)


class ReportsUnmaskedQ(DraftModelProposer):
    """Draws from the law after the grammar's mask, but hands the verifier the law before it."""

    def reported_law(self, law, logits, cfg, seen):
        return sampling.process_logits(logits, cfg, seen)


def position_q_before_mask(logits, shape, kind, cfg, rng, constraint=None):
    """The per-position tree builder (Medusa, DFlash, PARD, P-EAGLE) draws its children after the grammar's mask
    along each path but hands the verifier each position's law before it."""
    tree = clean_position_law_tree(logits, shape, kind, cfg, rng, constraint)
    if tree.draft_probs is None:
        return tree
    rows = torch.cat([torch.zeros(1, dtype=torch.long), shape.depth]).clamp_max(logits.shape[1] - 1)
    unmasked = sampling.process_logits(logits[:, rows], replace(cfg, repetition_penalty=1.0))  # [B, N+1, V]
    return replace(tree, draft_probs=unmasked.to(tree.draft_probs.dtype))


class DraftsOffTheIntersection(CrossVocabularyProposer):
    """Draws from the draft's whole vocabulary (the intersection mask left off the draws; a token the target does
    not spell snapped to target id 0) while the verifier gets the masked law, as it should."""

    def draft_law(self, logits, cfg, seen, allowed=None):
        own = sampling.process_logits(logits, replace(cfg, repetition_penalty=1.0, logit_bias=()))
        law = torch.zeros(*logits.shape[:-1], self.vocabulary.target_size, dtype=own.dtype)
        return law.index_add_(-1, self.target_of.clamp_min(0), own)

    def reported_law(self, law, logits, cfg, seen):
        return CrossVocabularyProposer.draft_law(self, logits, cfg, seen)


class DrawsDeduplicated(DraftModelProposer):
    def draw(self, law, count, rng, point_mass):
        return draw_deduplicated(law, count, self.kind, rng)


class DrawsSortedByQ(DraftModelProposer):
    def draw(self, law, count, rng, point_mass):
        return draw_sorted_by_q(law, count, self.kind, rng)


class RawTargetLaw(Decoder):
    def target_laws(self, logits, state, tree, allowed=None):
        return raw_softmax(logits.double(), self.sampling)


class BonusUnmasked(Decoder):
    """The grammar's mask at the drafted nodes' parents only: a leaf's row (where the bonus token is drawn
    once every node is accepted) keeps the unconstrained law (vLLM #44292)."""

    def target_laws(self, logits, state, tree, allowed=None):
        if allowed is not None and tree.num_nodes:
            leaves = torch.ones(tree.num_nodes, dtype=torch.bool)
            leaves[tree.parents[tree.parents >= 0]] = False
            allowed = allowed.clone()
            allowed[:, 1:][:, leaves] = True
        return super().target_laws(logits, state, tree, allowed)


class GrammarFollowsDrafts(Decoder):
    """The grammar advanced along the drafted chain (the tree's first root-to-leaf path) instead of the emitted
    tokens: a rejected draft enters its state, the recovered token does not."""

    def advance_constraint(self, tree, result):
        path = tree.shape.paths[0] if tree.num_nodes else []
        self.constraint.advance(tree.tokens[:, path] if path else result.tokens)


class TargetWithoutTemperature(Decoder):
    def target_laws(self, logits, state, tree, allowed=None):
        return target_without_temperature(logits, self.sampling)


# ---- the path a rule hands to the KV commit ---------------------------------------------------


def off_by_one(path: torch.Tensor) -> torch.Tensor:
    """Node i - 1 for every accepted node i > 0: the emitted tokens stay right, the KV kept is another node's
    (it matters from the second accepted node on, and only to later steps)."""
    return torch.where(path > 0, path - 1, path)


class TokenRulePathOffByOne(TreeVerifier):
    def committed_path(self, path):
        return off_by_one(path)


class BlockPathOffByOne(BlockVerifier):
    def committed_path(self, path):
        return off_by_one(path)


class TraversalPathOffByOne(TraversalVerifier):
    def committed_path(self, path):
        return off_by_one(path)


# ---- the speculation policy --------------------------------------------------------------------

POLICY_COSTS = dict(target_costs={0: 1.0, 1: 1.04, 2: 1.08, 4: 1.2, 8: 1.4}, draft_costs=(0.02, 0.06))  # no clock


class PrunesDrawnChildren(GoodputPolicy):
    """Trims i.i.d. children by their own draft probability (it must leave drawn children alone): the tree then
    depends on the step's draws after they were made."""

    def trim(self, tree):
        super().trim(tree)
        if tree.kind == "point" or tree.num_nodes == 0:
            return tree
        sure = (tree.scores[0] >= 0.4).long().cumprod(0)  # a chain: the first unsure node and all below it go
        return tree.keep_nodes(torch.arange(int(sure.sum())))


# ---- witnesses and the list -------------------------------------------------------------------

DRAFT_TREE = LoopCase(dict(branching=3, depth=1, kind="point"), depth=4)  # a bad commit shows from step 2
LOOKAHEAD = LoopCase(prompt=(1, 2, 0, 1), proposer_factory=lambda: LookaheadProposer(window=2, ngram=2, guesses=2))
CHAIN_D5 = LoopCase(dict(depth=3, kind="point"), depth=5)  # accepted nodes mid-sequence, then more steps
TREE_D5 = LoopCase(dict(branching=2, depth=2, kind="point"), depth=5)
SAMPLED_CHAIN = LoopCase(dict(depth=2, kind="iid"), sampling=SamplingConfig(temperature=0.7, top_k=2))
SAMPLED_POINT = LoopCase(dict(depth=3, kind="point"), sampling=SamplingConfig(temperature=0.7))
IID_SIBLINGS = LoopCase(dict(branching=3, depth=1, kind="iid"), depth=2)
POLICY_CHAIN = LoopCase(dict(depth=2, kind="iid"), depth=2, policy_factory=lambda: GoodputPolicy(**POLICY_COSTS))
GRAMMAR_CHAIN = LoopCase(dict(depth=2, kind="iid"), depth=3, grammar=A_THEN_B)  # rows advanced by what they emit
# a second tokenizer
CROSS_VOCABULARY = LoopCase(dict(depth=2, kind="iid"), depth=2, vocab=5, vocabulary=toy_vocabulary)
GRAMMAR_SAMPLED = LoopCase(dict(depth=2, kind="iid"), depth=2, grammar=PAIRS, vocab=5)  # two tokens left after a mask
PER_POSITION_GRAMMAR = LoopCase(proposer_factory=lambda: MedusaProposer(
    random_heads(16, 5, 2, seed=0, scale=2.0, dtype="float64"), [[0], [1], [0, 0]], kind="iid"), depth=3, grammar=PAIRS,
    vocab=5)  # Medusa's heads draw two children of the root and a grandchild, each after the pair grammar's mask
# every node accepted: the bonus is drawn at the leaf
GRAMMAR_POINT = LoopCase(dict(depth=1, kind="point"), depth=3, grammar=PAIRS, vocab=5,
                         sampling=SamplingConfig(temperature=0.8))


def loop_mutants() -> list[LoopMutant]:
    m = LoopMutant
    return [
        m("wrong-positions", "tree rows numbered past + row index instead of past + depth",
          DRAFT_TREE, target=WrongPositions),
        m("kv-crop-not-gather", "commit keeps the first slots (a scalar rewind) instead of the accepted path",
          DRAFT_TREE, target=CropInsteadOfGather),
        m("side-row-kv-kept", "the side rows' KV (lookahead's window) committed after the accepted path",
          LOOKAHEAD, target=SideRowsKeptAtCommit),
        m("attention-scale", "tree attention scores scaled by 1.3 / sqrt(d)", CHAIN_D5, plant=wrong_attention_scale),
        m("top-p-before-temperature", "the nucleus taken before the temperature (framework.core.sampling)",
          LoopCase(dict(depth=2, kind="point"), sampling=T07_TOPP09),
          plant=lambda: planted(sampling, "process_logits", top_p_before_temperature)),
        m("draft-reports-raw-q", "the draft model hands the verifier its raw softmax, not the law it drew from",
          SAMPLED_CHAIN, proposer=ReportsRawQ),
        m("draft-iid-deduplicated", "the draft model replaces duplicate iid children by unseen tokens",
          IID_SIBLINGS, proposer=DrawsDeduplicated),
        m("draft-iid-sorted-by-q", "the draft model sorts its iid children by q",
          IID_SIBLINGS, proposer=DrawsSortedByQ),
        m("decoder-raw-p", "the decoder judges by the target's raw softmax", SAMPLED_POINT, decoder=RawTargetLaw),
        m("decoder-p-without-temperature", "the decoder's target laws miss the temperature", SAMPLED_POINT,
          decoder=TargetWithoutTemperature),
        m("token-rule-path-off-by-one", "the token rule hands the KV commit node i - 1 for each accepted node i > 0",
          CHAIN_D5, verifier=TokenRulePathOffByOne()),
        m("block-path-off-by-one", "block verification hands the KV commit node i - 1 for each accepted node i > 0",
          LoopCase(dict(depth=3, kind="point"), depth=5, verifier=BlockVerifier()), verifier=BlockPathOffByOne()),
        m("policy-prunes-drawn-children", "the speculation policy trims i.i.d. children by their own draft probability",
          POLICY_CHAIN, policy=lambda: PrunesDrawnChildren(**POLICY_COSTS)),
        m("traversal-path-off-by-one",
          "traversal verification hands the KV commit node i - 1 for each accepted node i > 0",
          LoopCase(dict(branching=2, depth=2, kind="point"), depth=5, verifier=TraversalVerifier()),
          verifier=TraversalPathOffByOne()),
        m("grammar-bonus-unmasked", "the grammar's mask left off the bonus position (a leaf's row)", GRAMMAR_POINT,
          decoder=BonusUnmasked),
        m("grammar-follows-drafts", "the grammar advanced along the drafted path, not the emitted tokens",
          GRAMMAR_CHAIN, decoder=GrammarFollowsDrafts),
        m("grammar-q-before-mask", "the draft draws after the grammar's mask but reports its law before it",
          GRAMMAR_SAMPLED, proposer=ReportsUnmaskedQ),
        m("per-position-q-before-mask", "the per-position tree builder (Medusa, DFlash, PARD, P-EAGLE) reports each "
          "position's law before the grammar's mask it drew after", PER_POSITION_GRAMMAR,
          plant=lambda: planted(position_tree, "position_law_tree", position_q_before_mask)),
        m("cross-vocabulary-mask-missing", "a draft of another vocabulary draws off the intersection (its law "
          "unmasked) but reports the masked law", CROSS_VOCABULARY, proposer=DraftsOffTheIntersection),
    ]
