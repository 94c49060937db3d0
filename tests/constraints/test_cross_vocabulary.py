"""A draft of another vocabulary (token-level intersection, a padded embedding): the exact law through the real
loop on the toy second tokenizer at any temperature and kind, the map's spellings, greedy identity at batch > 1."""

import pytest
import torch

from engine.loop import DecodeOptions, generate
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.loop_mutants import CLEAN_AT_MOST, TOY, LoopCase
from harness.toy_vocabularies import (
    DRAFT_SPELLINGS,
    TARGET_SPELLINGS,
    longest_match,
    toy_vocabulary,
    toy_vocabulary_back,
)
from proposers import CrossVocabularyProposer, StringMatchProposer, VocabularyMap


def test_the_map_spells_each_target_token_in_draft_tokens():
    vocabulary = toy_vocabulary()
    assert vocabulary.shared == 4 and vocabulary.unspelled == 0
    for target_id, text in enumerate(TARGET_SPELLINGS):
        assert "".join(DRAFT_SPELLINGS[d] for d in vocabulary.expansions[target_id]) == text
    assert vocabulary.target_of.tolist() == [3, 1, 0, -1, 4, -1]  # "ca" and "x" are the draft's own
    assert vocabulary.expansions[2] == (2, 1)  # "ab" is read as "a" then "b"
    assert longest_match("cab") == [3, 1]


def test_a_padded_embedding_maps_the_ids_both_have():
    grown = VocabularyMap.padded(target_size=5, draft_size=7)
    assert grown.target_of.tolist() == [0, 1, 2, 3, 4, -1, -1] and grown.unspelled == 0
    shrunk = VocabularyMap.padded(target_size=6, draft_size=4)
    assert shrunk.shared == 4 and shrunk.unspelled == 2


def test_disjoint_vocabularies_are_refused():
    with pytest.raises(ValueError, match="share no token"):
        VocabularyMap.from_spellings(["a", "b"], ["x", "y"], lambda text: [0])


CASES = {
    "toy tokenizer, iid chain, T=1": LoopCase(dict(depth=2, kind="iid"), depth=2, vocab=5, vocabulary=toy_vocabulary),
    "toy tokenizer, iid, T=0.7 top-3": LoopCase(dict(depth=1, kind="iid"), depth=3, vocab=5, vocabulary=toy_vocabulary,
                                                sampling=SamplingConfig(temperature=0.7, top_k=3)),
    "toy tokenizer, wor siblings": LoopCase(dict(branching=2, depth=1, kind="wor"), depth=2, vocab=5,
                                            vocabulary=toy_vocabulary),
    "toy tokenizer, point chain, greedy": LoopCase(dict(depth=3, kind="point"), depth=4, vocab=5,
                                                   vocabulary=toy_vocabulary, sampling=SamplingConfig(temperature=0)),
    "padded draft embedding": LoopCase(dict(depth=2, kind="iid"), depth=2, vocab=5,
                                       vocabulary=lambda: VocabularyMap.padded(5, 7)),
    "padded target embedding": LoopCase(dict(depth=2, kind="iid"), depth=2, vocab=5,
                                        vocabulary=lambda: VocabularyMap.padded(5, 4)),
}


def string_match():
    return StringMatchProposer(tiny_random_model("llama", seed=1, vocab_size=6, **TOY), toy_vocabulary(),
                               toy_vocabulary_back(), depth=2)


CASES |= {f"string match, {name}": LoopCase(proposer_factory=string_match, vocab=5, depth=3, sampling=sampling)
          for name, sampling in [("T=1", SamplingConfig()), ("T=0.7 top-3", SamplingConfig(temperature=0.7, top_k=3)),
                                 ("greedy", SamplingConfig(temperature=0))]}


@pytest.mark.parametrize("name", CASES)
def test_exact_law_through_the_loop(name):
    tv = CASES[name].tv()
    assert tv <= CLEAN_AT_MOST, f"{name}: TV {tv:.2e}"


def test_greedy_identity_at_batch_four_with_ragged_spellings():
    """Rows whose tokens spell into different numbers of draft tokens read them in one forward, each its own
    (token-level intersection and string match)."""
    target = tiny_random_model("llama", seed=9, vocab_size=5, **{**TOY, "dtype": "float32"})  # emits every token
    draft = tiny_random_model("llama", seed=1, vocab_size=6, **{**TOY, "dtype": "float32"})
    prompts = torch.tensor([[2, 0, 1], [0, 2, 2], [3, 4, 2], [1, 1, 0]])  # token 2 ("ab") spells as two draft tokens
    greedy = SamplingConfig(temperature=0)
    for proposer in (CrossVocabularyProposer(draft, toy_vocabulary(), depth=3, kind="point"),
                     StringMatchProposer(draft, toy_vocabulary(), toy_vocabulary_back(), depth=3)):
        batch = generate(HFTarget(target), proposer, prompts, 16, greedy)
        for row in range(4):
            alone = generate(HFTarget(target), None, prompts[row:row + 1], 16, greedy).tokens[0]
            assert batch.tokens[row].tolist() == alone.tolist(), type(proposer).__name__
        assert batch.stats.accepted_total > 0 and bool((batch.tokens == 2).any())  # drafts kept; "ab" read as two


def test_the_vocabularies_must_fit_the_models():
    draft = tiny_random_model("llama", seed=1, vocab_size=6, **TOY)
    with pytest.raises(ValueError, match="vocabulary map is for 7 draft tokens, the draft has 6"):
        CrossVocabularyProposer(draft, VocabularyMap.padded(5, 7))
    proposer = CrossVocabularyProposer(draft, toy_vocabulary())
    with pytest.raises(ValueError, match="map is for 5 target tokens, the target has 3"):
        proposer.prefill(torch.tensor([[1, 2]]), HFTarget(tiny_random_model("llama", seed=0, vocab_size=3, **TOY)))


def test_a_draft_whose_context_ends_first_stops_drafting():
    """The draft reads more tokens than the target (or has less context): once its own context is full it drafts
    nothing more, and decoding goes on, greedy as plain greedy."""
    target = tiny_random_model("llama", seed=9, vocab_size=5, **{**TOY, "dtype": "float32"})
    draft = tiny_random_model("llama", seed=1, vocab_size=6, max_positions=12, **{**TOY, "dtype": "float32"})
    prompts = torch.tensor([[2, 0, 1, 2], [0, 2, 2, 1]])  # "ab" (token 2) spells as two draft tokens
    greedy = SamplingConfig(temperature=0)
    plain = generate(HFTarget(target), None, prompts, 16, greedy).tokens
    for proposer in (CrossVocabularyProposer(draft, toy_vocabulary(), depth=3, kind="point"),
                     StringMatchProposer(draft, toy_vocabulary(), toy_vocabulary_back(), depth=3)):
        out = generate(HFTarget(target), proposer, prompts, 16, greedy)
        assert torch.equal(out.tokens, plain), type(proposer).__name__
        assert out.stats.steps[-1].nodes == 0 and out.stats.steps[0].nodes > 0  # drafted, then stopped


class OnlyAfterA:
    """A constraint that allows "ab" (the target's token 2, which the toy draft lacks) and nothing else."""

    vocab_size = 5

    def start(self, batch_size):
        self.batch = batch_size

    def allowed(self, tokens, shape, rows=None):
        count = shape.num_nodes + 1 if rows is None else len(rows)
        mask = torch.zeros(tokens.shape[0], count, 5, dtype=torch.bool)
        mask[..., 2] = True
        return mask

    def advance(self, tokens):
        assert bool(((tokens == 2) | (tokens < 0)).all())

    def select(self, rows):
        pass


def test_a_grammar_that_leaves_no_shared_token_leaves_the_draft_its_shared_ones():
    """Nothing the constraint allows is in the intersection: the draft draws from its shared tokens (the verifier
    rejects them) rather than from an empty law."""
    target = tiny_random_model("llama", seed=9, vocab_size=5, **{**TOY, "dtype": "float32"})
    draft = tiny_random_model("llama", seed=1, vocab_size=6, **{**TOY, "dtype": "float32"})
    out = generate(HFTarget(target), CrossVocabularyProposer(draft, toy_vocabulary(), depth=2), torch.tensor([[0, 1]]),
                   6, SamplingConfig(), seed=0, options=DecodeOptions(constraint=OnlyAfterA()))
    assert out.tokens[0].tolist() == [2] * 6 and out.stats.steps[0].nodes > 0
