"""Chat data through the target's own tokenizer and template: both schemas, int32 ids, assistant-only labels,
the tokenizer recorded and checked."""

import pytest
import torch

from framework.data.chat import Message, from_sharegpt, render_chat
from framework.data.sources import Messages, ShareGPT, cached_splits, tokenize_splits
from framework.data.token_data import TokenData
from framework.training.losses import KL
from framework.zoo.checkpoints import load_causal_lm
from framework.zoo.tokenizer import load_tokenizer
from proposers.draft_training import DraftObjective
from tests.training.conftest import CONVERSATIONS


def conversation(i=0):
    return [Message(role, text) for role, text in CONVERSATIONS[i]]


@pytest.mark.parametrize("schema", [ShareGPT, Messages])
def test_both_schemas_tokenize_alike_and_round_trip(schema, chat_files, chat_tokenizer):
    source = schema(path=str(chat_files[schema.schema]))
    documents = list(source.documents())
    assert len(documents) == len(CONVERSATIONS) and documents[3].key == "c3"
    assert [m.role for m in documents[0].messages] == ["system", "user", "assistant", "user", "assistant"]
    splits = tokenize_splits(source, chat_tokenizer, heldout_fraction=0.2, valid_every=4)
    every = torch.cat([splits[s].ids for s in ("train", "valid", "heldout")])
    assert every.dtype == torch.int32 and int(every.max()) >= 2**15  # past what int16 holds
    ids, _ = render_chat(chat_tokenizer, list(documents[0].messages))
    rendered = chat_tokenizer.apply_chat_template([{"role": m.role, "content": m.content}
                                                   for m in documents[0].messages], tokenize=False)
    assert chat_tokenizer.decode(ids) == rendered and rendered.count("<|endoftext|>") == 1  # BOS once, by the template


def test_sharegpt_and_messages_give_the_same_tokens(chat_files, chat_tokenizer):
    a = tokenize_splits(ShareGPT(path=str(chat_files["sharegpt"])), chat_tokenizer, 0.2, 4)
    b = tokenize_splits(Messages(path=str(chat_files["messages"])), chat_tokenizer, 0.2, 4)
    assert all(torch.equal(a[s].ids, b[s].ids) and torch.equal(a[s].loss_mask, b[s].loss_mask) for s in a)


def test_the_labels_are_the_assistant_turns_and_their_end_tokens(chat_tokenizer):
    ids, mask = render_chat(chat_tokenizer, conversation(2))
    labelled = chat_tokenizer.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert labelled == "It is 5.<|im_end|>\nTwice that is 10, of course!<|im_end|>\n"


def draft_loss(target, ids, mask):
    """The distillation loss of a perturbed copy of the target (the target itself would score 0 everywhere)."""
    draft = load_causal_lm(target.config.name_or_path)
    with torch.no_grad():
        for p in draft.parameters():
            p.add_(0.05 * torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())))
        sums, counts = DraftObjective(target, {"kl": draft}, {"kl": KL()})(ids[None], mask[None],
                                                                            torch.tensor([0]), None)
    return float(sums[0] / counts[0])


def test_user_turn_tokens_never_reach_the_loss(chat_target, chat_tokenizer):
    """A trailing user turn, whatever it says, leaves the loss as it was: it is context for nothing and no label.
    Counting every token (the mask all ones) would change it: the check can fail."""
    target = load_causal_lm(chat_target)
    base, extra_a, extra_b = (conversation(1), [Message("user", "Thanks a lot!")], [Message("user", "Why though? 42")])
    ids_a, mask_a = (torch.tensor(x) for x in render_chat(chat_tokenizer, base + extra_a))
    ids_b, mask_b = (torch.tensor(x) for x in render_chat(chat_tokenizer, base + extra_b))
    assert not torch.equal(ids_a, ids_b)
    assert draft_loss(target, ids_a, mask_a) == pytest.approx(draft_loss(target, ids_b, mask_b), rel=1e-6)
    every_a, every_b = torch.ones_like(mask_a), torch.ones_like(mask_b)
    assert draft_loss(target, ids_a, every_a) != pytest.approx(draft_loss(target, ids_b, every_b), rel=1e-5)


def test_data_of_another_tokenizer_is_refused_by_name(chat_files, chat_tokenizer, tmp_path):
    zoo = load_tokenizer("experiments/zoo/target")
    splits = cached_splits(Messages(path=str(chat_files["messages"])), chat_tokenizer, tmp_path, 0.2, 4)
    with pytest.raises(ValueError, match=r"made by tokenizer .*chat_target.* not by .*zoo/target"):
        splits["train"].check(zoo)
    again = cached_splits(Messages(path=str(chat_files["messages"])), chat_tokenizer, tmp_path, 0.2, 4)  # read back
    assert torch.equal(again["train"].ids, splits["train"].ids)


def test_token_data_refuses_mismatched_shapes_and_short_streams():
    with pytest.raises(ValueError, match="differ in shape"):
        TokenData(torch.zeros(4), torch.ones(5, dtype=torch.bool), "h")
    with pytest.raises(ValueError, match="not one window"):
        TokenData(torch.zeros(4), torch.ones(4, dtype=torch.bool), "h").batch(1, 8, torch.Generator())


def test_bad_conversations_are_named(chat_tokenizer, tmp_path):
    with pytest.raises(ValueError, match="speaker 'robot'"):
        from_sharegpt([{"from": "robot", "value": "hi"}])
    with pytest.raises(ValueError, match="without an assistant turn"):
        render_chat(chat_tokenizer, [Message("user", "hello")])
    rewriting = chat_tokenizer.__class__.from_pretrained(chat_tokenizer.name_or_path)
    rewriting.chat_template = ("{% for m in messages %}{% if loop.last or m['role'] != 'assistant' %}{{ m['role'] }}: "
                               "{{ m['content'] }}\n{% endif %}{% endfor %}"
                               "{% if add_generation_prompt %}assistant: {% endif %}")
    # it drops earlier answers (each turn is then its own sample), and its generation prompt ends in a space that the
    # tokenizer merges with the answer's first word: no turn's span can be told apart, even alone
    with pytest.raises(ValueError, match="not a prefix.*merges tokens across the turn boundary"):
        render_chat(rewriting, conversation(0))
    no_template = chat_tokenizer.__class__.from_pretrained(chat_tokenizer.name_or_path)
    no_template.chat_template = None
    with pytest.raises(ValueError, match="no chat template"):
        render_chat(no_template, conversation(0))
    (tmp_path / "other.jsonl").write_text('{"text": "no conversation here"}\n')
    with pytest.raises(ValueError, match="no 'messages' column"):
        list(Messages(path=str(tmp_path / "other.jsonl")).documents())
    with pytest.raises(FileNotFoundError, match="no data at"):
        list(Messages(path=str(tmp_path / "missing.jsonl")).documents())
