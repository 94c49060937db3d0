"""A tiny chat target (its own 40k-token tokenizer, a ChatML template) and chat files in both published schemas."""

import json

import pytest
from transformers import AutoTokenizer

from framework.lm.chat_models import save_tiny_chat_target

CONVERSATIONS = [
    [("system", "Answer in one line."), ("user", f"What is {i} plus {i + 1}?"), ("assistant", f"It is {2 * i + 1}."),
     ("user", "And twice that?"), ("assistant", f"Twice that is {4 * i + 2}, of course!")]
    for i in range(40)
]
SHAREGPT_ROLE = {"system": "system", "user": "human", "assistant": "gpt"}


@pytest.fixture(scope="session")
def chat_target(tmp_path_factory):
    return save_tiny_chat_target(tmp_path_factory.mktemp("chat_target"))


@pytest.fixture(scope="session")
def chat_tokenizer(chat_target):
    return AutoTokenizer.from_pretrained(chat_target)


@pytest.fixture(scope="session")
def chat_files(tmp_path_factory):
    """{schema: path}: the same conversations as ShareGPT JSONL and as messages JSONL."""
    folder = tmp_path_factory.mktemp("chats")
    sharegpt, messages = folder / "sharegpt.jsonl", folder / "messages.jsonl"
    sharegpt.write_text("".join(json.dumps({"id": f"c{i}", "conversations": [{"from": SHAREGPT_ROLE[r], "value": t}
                                                                              for r, t in c]}) + "\n"
                                for i, c in enumerate(CONVERSATIONS)))
    messages.write_text("".join(json.dumps({"id": f"c{i}", "messages": [{"role": r, "content": t}
                                                                        for r, t in c]}) + "\n"
                                for i, c in enumerate(CONVERSATIONS)))
    return {"sharegpt": sharegpt, "messages": messages}
