"""Input files that are not what they claim are named with the file (and the line, the conversation) before any
work: an empty JSONL, a torn line, bad UTF-8, a conversation opened by the assistant or with an empty (null) answer,
a head config that is not JSON, a block size past the target's context (issue 58, case 9). Blank lines are read."""

from __future__ import annotations

import json

import pytest

from framework.data.sources import Messages, ShareGPT, load_rows
from framework.lm.models import tiny_random_model
from proposers.draft_training import DraftTrainConfig, train_drafts
from proposers.heads import load_head
from tests.training.test_roots import data


def write(path, text: str | bytes):
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    return path


GOOD = json.dumps({"id": "a", "messages": [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "yo"}]})


@pytest.mark.parametrize("text, message", [
    ("", r"empty\.jsonl: holds no rows"),
    (GOOD + "\n" + GOOD[:30] + "\n", r"empty\.jsonl:2: not a JSON line"),
    (b'{"id": "\xff"}\n', r"empty\.jsonl: not UTF-8"),
    ("[1, 2]\n", r"empty\.jsonl:1: a JSON line must be an object"),
])
def test_a_bad_jsonl_file_is_named_with_its_line(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        load_rows(str(write(tmp_path / "empty.jsonl", text)))


def test_blank_lines_are_skipped(tmp_path):
    assert len(load_rows(str(write(tmp_path / "rows.jsonl", f"\n{GOOD}\n\n{GOOD}\n\n")))) == 2


@pytest.mark.parametrize("messages, message", [
    ([{"role": "assistant", "content": "first"}, {"role": "user", "content": "hi"}], "opens with a user turn"),
    ([{"role": "user", "content": "hi"}, {"role": "assistant", "content": None}], "assistant turn 1 is empty"),
    ([{"role": "user", "content": "hi"}, {"role": "system", "content": "x"}, {"role": "assistant", "content": "y"}],
     "a system message after the first turn"),
])
def test_a_conversation_that_cannot_train_is_named(tmp_path, messages, message):
    path = write(tmp_path / "chats.jsonl", json.dumps({"id": "c7", "messages": messages}) + "\n")
    with pytest.raises(ValueError, match=rf"chats\.jsonl, conversation c7: .*{message}"):
        list(Messages(path=str(path)).documents())


def test_sharegpt_null_answers_are_named(tmp_path):
    path = write(tmp_path / "s.jsonl", json.dumps({"conversations": [{"from": "human", "value": "hi"},
                                                                       {"from": "gpt", "value": None}]}) + "\n")
    with pytest.raises(ValueError, match=r"s\.jsonl, conversation .*#0: assistant turn 1 is empty"):
        list(ShareGPT(path=str(path)).documents())


def test_a_head_config_that_is_not_json_is_named(tmp_path):
    write(tmp_path / "config.json", '{"architectures": ["LlamaForCausalLMEagle3"], "hidden_size": ')
    write(tmp_path / "model.safetensors", b"")
    with pytest.raises(ValueError, match=r"config\.json: not valid JSON \(line 1"):
        load_head(tmp_path)


def test_a_block_past_the_targets_context_is_refused(tmp_path):
    target = tiny_random_model("llama", seed=0, max_positions=32)
    with pytest.raises(ValueError, match="block_size 64 is past the target's context of 32"):
        train_drafts(target, tiny_random_model("llama", seed=1, num_layers=1, max_positions=32), data(), tmp_path,
                     DraftTrainConfig(steps=1, batch_size=2, block_size=64, eval_tokens=64, device="cpu"))
