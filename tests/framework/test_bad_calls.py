"""Calls an engine builder can get wrong, each named before any work (issue 58, case 10): a seed torch cannot take,
speculate flags that are not flags, an attention mask of another shape, nested or meta tensors, a draft with another
tokenizer of the same size."""

from __future__ import annotations

import pytest
import torch

from engine.loop import generate
from framework.core.sampling import SamplingConfig
from framework.core.tree import CandidateTree
from framework.lm.chat_models import pair_tokenizer
from framework.lm.models import tiny_random_model
from framework.lm.target import HFTarget
from proposers import DraftModelProposer
from verifiers import verify

PROMPT = torch.tensor([[1, 2, 3]])


@pytest.mark.parametrize("kwargs, message", [
    (dict(seed=2**70), r"seed must be an integer in \[0, 2\*\*64\)"),
    (dict(seed=-1), r"seed must be an integer"),
    (dict(speculate="yes"), "speculate must be one True/False flag per row"),
    (dict(speculate=[0.5]), "speculate must be one True/False flag per row"),
    (dict(attention_mask=torch.ones(1, 2, dtype=torch.long)), r"attention_mask must be \[B, L\] = \[1, 3\]"),
])
def test_a_bad_call_is_named(kwargs, message):
    with pytest.raises(ValueError, match=message):
        generate(HFTarget(tiny_random_model("llama")), None, PROMPT, 3, SamplingConfig(), **kwargs)


def test_nested_and_meta_prompts_are_named():
    target = HFTarget(tiny_random_model("llama"))
    with pytest.raises(ValueError, match="not nested"):
        generate(target, None, torch.nested.nested_tensor([torch.tensor([1, 2]), torch.tensor([3])]), 2)
    with pytest.raises(ValueError, match="meta device"):
        generate(target, None, PROMPT.to("meta"), 2)


def test_the_verifier_names_tensors_without_values():
    tree = CandidateTree.chain(torch.tensor([[1, 2]]))
    with pytest.raises(ValueError, match="target_probs is on the meta device"):
        verify(tree, torch.full((1, 3, 4), 0.25, dtype=torch.float64).to("meta"), torch.Generator())


def test_a_draft_with_another_tokenizer_of_the_same_size_is_named(tmp_path):
    for name, seed in (("target", 0), ("draft", 1)):
        model = tiny_random_model("llama", vocab_size=300, seed=seed)
        model.save_pretrained(tmp_path / name)
        pair_tokenizer(300, seed=seed).save_pretrained(tmp_path / name)  # two orders of merges: other ids
    from framework.zoo.checkpoints import load_causal_lm

    target, draft = (load_causal_lm(tmp_path / name) for name in ("target", "draft"))
    with pytest.raises(ValueError, match="the draft's tokenizer .* is not the target's"):
        generate(HFTarget(target), DraftModelProposer(draft), PROMPT, 3)
    pair_tokenizer(300, seed=0).save_pretrained(tmp_path / "draft")  # the same tokenizer: accepted
    from proposers.draft_model import fingerprint_at

    fingerprint_at.cache_clear()
    assert len(generate(HFTarget(target), DraftModelProposer(load_causal_lm(tmp_path / "draft")),
                        PROMPT, 3).tokens[0]) == 3


def test_a_saved_head_whose_weights_were_altered_is_named(tmp_path):
    """Plausible values written over a saved head's weights load silently without a checksum (issue 58, case 10)."""
    from safetensors.torch import load_file, save_file

    from proposers.medusa.heads import MedusaHeads, random_heads

    random_heads(32, 64, 2, seed=1).save(tmp_path)
    assert MedusaHeads.load(tmp_path).config.num_heads == 2
    weights = next(tmp_path.glob("*.safetensors"))
    state = load_file(weights)
    key = next(iter(state))
    state[key] = state[key] * 1.01  # plausible, wrong
    save_file(state, weights)
    with pytest.raises(ValueError, match="checksum differs"):
        MedusaHeads.load(tmp_path)
