"""Log-probabilities returned by generate: each emitted token's under the processed target law along its own
path (a grammar, a logit bias and the penalty included), the same with or without speculation, checked against
transformers' own processors on a plain forward of each prefix."""

import pytest
import torch

from engine.loop import DecodeOptions, generate
from framework.core.sampling import SamplingConfig
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from harness.loop_mutants import TOY
from harness.reference import reference_law
from harness.toy_grammar import PAIRS
from proposers import DraftModelProposer

SAMPLED = SamplingConfig(temperature=0.9, repetition_penalty=1.2, logit_bias={1: 1.0})
GREEDY = SamplingConfig(temperature=0, logit_bias={1: 1.0})


def reference_logprobs(model, prompt, tokens, sampling, grammar=PAIRS):
    """[T, V] log-laws at each emitted position by plain forwards and transformers' processors (greedy: T = 1), under
    `grammar`'s hand-written automaton (None: no grammar)."""
    law_cfg = SamplingConfig(logit_bias=sampling.logit_bias, repetition_penalty=sampling.repetition_penalty) \
        if sampling.greedy else sampling
    rows = []
    for t in range(len(tokens)):
        sequence = torch.cat([prompt[0], torch.tensor(tokens[:t], dtype=torch.long)])[None]
        logits = model(sequence).logits[:, -1].double()
        rule = None if grammar is None else \
            lambda row, ids: grammar.allowed_next(tuple(ids[prompt.shape[1]:].tolist()))  # noqa: E731
        rows.append(reference_law(logits, law_cfg, sequence, rule)[0].log())
    return torch.stack(rows)


@pytest.mark.parametrize("sampling", [SAMPLED, GREEDY], ids=["sampled", "greedy"])
@pytest.mark.parametrize("speculative", [False, True], ids=["plain", "speculative"])
def test_logprobs_are_the_processed_target_law(sampling, speculative):
    target = tiny_random_model("llama", seed=0, vocab_size=5, **TOY)
    draft = tiny_random_model("llama", seed=1, vocab_size=5, **TOY)
    prompt = torch.tensor([[1, 2, 0, 3]])
    proposer = (DraftModelProposer(draft, depth=3, kind="iid" if not sampling.greedy else "point") if speculative
                else None)
    out = generate(HFTarget(target), proposer, prompt, 12, sampling, seed=3,
                   options=DecodeOptions(constraint=PAIRS.constraint(), logprobs=2))
    tokens = out.tokens[0].tolist()
    assert -1 not in tokens
    expected = reference_logprobs(target, prompt, tokens, sampling)  # [T, V]
    chosen = expected.gather(1, torch.tensor(tokens)[:, None]).squeeze(1)
    torch.testing.assert_close(out.logprobs.chosen[0], chosen, atol=1e-9, rtol=0)
    torch.testing.assert_close(out.logprobs.top[0], expected.topk(2, dim=-1).values, atol=1e-9, rtol=0)
    if sampling.greedy:  # the token is the first argmax of the reported law
        assert out.logprobs.top_ids[0, :, 0].tolist() == tokens
    if speculative:
        assert out.stats.summary()["tokens_per_forward"] > 1  # tokens came from accepted drafts too


def test_positions_past_the_end_carry_nothing():
    target = tiny_random_model("llama", seed=0, vocab_size=5, **TOY)
    out = generate(HFTarget(target), None, torch.tensor([[1, 2]]), 6, SamplingConfig(), seed=0,
                   options=DecodeOptions(eos_token_id=4, logprobs=0))
    ended = out.tokens[0] < 0
    assert out.logprobs.top.shape == (1, 6, 0)
    assert bool((out.logprobs.chosen[0][ended] == 0).all()) and bool((out.logprobs.chosen[0][~ended] < 0).all())


def test_logprobs_count_is_checked():
    target = tiny_random_model("llama", seed=0, vocab_size=5, **TOY)
    with pytest.raises(ValueError, match="top_logprobs must be None or an integer >= 0"):
        generate(HFTarget(target), None, torch.tensor([[1, 2]]), 3, options=DecodeOptions(logprobs=-1))


PENALISED = {"greedy, penalty": SamplingConfig(temperature=0, repetition_penalty=1.5),
             "sampled, penalty": SamplingConfig(temperature=0.9, repetition_penalty=1.3, logit_bias={1: 0.5})}


@pytest.mark.parametrize("sampling", PENALISED)
def test_logprobs_of_a_batch_whose_rows_leave_follow_each_rows_own_path(sampling):
    """Three rows, a draft tree (two branches, two deep: the penalty's history is each node's own path), rows that end
    at EOS at different steps and leave the batch: every row's log-probs are its own processed law, by plain
    forwards of that row alone and transformers' processors (issue 52, finding 4)."""
    cfg = PENALISED[sampling]
    target = tiny_random_model("llama", seed=0, vocab_size=5, **TOY)
    draft = tiny_random_model("llama", seed=0, vocab_size=5, **TOY)  # the target's twin: its drafts get accepted
    prompts = torch.tensor([[1, 1, 1, 1], [3, 3, 3, 3], [0, 0, 2, 2]])  # few tokens seen: the drafted path's count
    kind = "point" if cfg.greedy else "iid"
    out = generate(HFTarget(target), DraftModelProposer(draft, branching=2, depth=2, kind=kind), prompts, 10, cfg,
                   seed=2, options=DecodeOptions(eos_token_id=None if cfg.greedy else 4, logprobs=2))
    lengths = [int((row >= 0).sum()) for row in out.tokens]
    for b, length in enumerate(lengths):
        tokens = out.tokens[b, :length].tolist()
        expected = reference_logprobs(target, prompts[b:b + 1], tokens, cfg, grammar=None)  # [T, V]
        chosen = expected.gather(1, torch.tensor(tokens)[:, None]).squeeze(1)
        torch.testing.assert_close(out.logprobs.chosen[b, :length], chosen, atol=1e-9, rtol=0)
        torch.testing.assert_close(out.logprobs.top[b, :length], expected.topk(2, dim=-1).values, atol=1e-9, rtol=0)
    if not cfg.greedy:  # the first row leaves first, then the others at different steps
        assert lengths[0] < min(lengths[1:]) and len(set(lengths)) == 3, lengths
    assert out.stats.summary()["tokens_per_forward"] > 1
