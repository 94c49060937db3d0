"""Every training objective trains on the assistant's tokens and nothing else: a loss that records the label tokens
it is handed shows, decoded, exactly the assistant turns (with their end tokens) of a multi-turn chat, with and without
a system prompt, and exactly the text of a plain document, at every unrolled depth (EAGLE) and every head (Medusa).
A mask shifted by one position hands the next user turn's opening token and skips the answer's first (issue 52,
finding 2)."""

from __future__ import annotations

import pytest
import torch

from framework.data.chat import Message
from framework.data.sources import Document, tokenize
from framework.zoo.checkpoints import load_causal_lm
from proposers.draft_training import DraftObjective
from proposers.eagle.head import random_head
from proposers.eagle.training import EagleObjective, EagleTrainConfig
from proposers.medusa.heads import random_heads
from proposers.medusa.training import MedusaObjective, MedusaTrainConfig

TURNS = [Message("user", "What is 2 plus 3?"), Message("assistant", "It is 5."), Message("user", "And twice that?"),
         Message("assistant", "Ten, of course.")]
DOCUMENTS = {
    "chat": Document("c", messages=tuple(TURNS)),
    "chat with a system prompt": Document("s", messages=(Message("system", "Be brief."), *TURNS)),
    "plain text": Document("t", text="def add(a, b):\n    return a + b\n"),
}


class RecordsLabels:
    """A token loss that keeps what it is handed as labels (and contributes nothing)."""

    def __init__(self):
        self.calls: list[list[int]] = []

    def __call__(self, logp, teacher, labels):
        self.calls.append(labels.tolist())
        return logp.sum(-1) * 0


def expected_text(document: Document) -> str:
    """What the model writes: each assistant turn with its end-of-turn token as ChatML closes it, or the text."""
    if document.text is not None:
        return document.text
    return "".join(f"{m.content}<|im_end|>\n" for m in document.messages if m.role == "assistant")


def objectives(target, spy):
    hidden, vocab, layers = target.config.hidden_size, target.config.vocab_size, target.config.num_hidden_layers
    return {
        "draft model": DraftObjective(target, {"spy": load_causal_lm(target.config.name_or_path)}, {"spy": spy}),
        "EAGLE-3, 3 unrolled steps": EagleObjective(
            target, {"spy": random_head(hidden, vocab, layers, None, "eagle3", num_heads=2, num_kv_heads=1)},
            EagleTrainConfig(losses={"spy": spy}, unroll=3, noise=0.0, feature_weight=0.0)),
        "EAGLE-1": EagleObjective(target, {"spy": random_head(hidden, vocab, layers, None, "eagle", num_heads=2,
                                                              num_kv_heads=1)}, EagleTrainConfig(losses={"spy": spy})),
        "Medusa, 3 heads": MedusaObjective(target, {"spy": random_heads(hidden, vocab, 3)},
                                           MedusaTrainConfig(num_heads=3, losses={"spy": spy}, bf16=False)),
    }


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_objective_trains_on_the_assistants_tokens_only(document, chat_target, chat_tokenizer):
    ids, mask = tokenize(DOCUMENTS[document], chat_tokenizer)
    target = load_causal_lm(chat_target)
    want = expected_text(DOCUMENTS[document])
    for name in ("draft model", "EAGLE-3, 3 unrolled steps", "EAGLE-1", "Medusa, 3 heads"):
        spy = RecordsLabels()
        with torch.no_grad():
            objectives(target, spy)[name](torch.tensor([ids]), torch.tensor([mask]), torch.tensor([0]), None)
        assert spy.calls, name
        for depth, labels in enumerate(spy.calls):  # an unrolled step or a head each; the first label sits past them
            if document == "plain text":  # the text's first tokens precede every depth's first prediction
                assert (chat_tokenizer.decode(labels)
                        == chat_tokenizer.decode(ids[len(ids) - len(labels):])), (name, depth)
                assert want.endswith(chat_tokenizer.decode(labels)) and len(labels) >= len(ids) - 5, (name, depth)
            else:
                assert chat_tokenizer.decode(labels) == want, (name, depth)
