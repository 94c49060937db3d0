"""The target rewrites every assistant turn (batched, turn by turn), into resumable messages-schema shards."""

import json

import torch

from framework.data.regenerate import RegenerateConfig, regenerate
from framework.data.sources import Messages, ShareGPT
from framework.lm.text import tokenizer_of
from framework.zoo.checkpoints import load_causal_lm
from tests.training.conftest import CONVERSATIONS


def test_answers_are_the_targets_own_and_a_rerun_resumes(chat_target, chat_files, chat_tokenizer, tmp_path):
    target = load_causal_lm(chat_target)
    source = ShareGPT(path=str(chat_files["sharegpt"]), limit=5)
    cfg = RegenerateConfig(max_new_tokens=6, batch=2, shard_size=2)
    folder = regenerate(source, target, tokenizer_of(target), tmp_path / "regen", cfg)
    shards = sorted(folder.glob("shard_*.jsonl"))
    assert [p.name for p in shards] == ["shard_00000.jsonl", "shard_00001.jsonl", "shard_00002.jsonl"]
    rows = [json.loads(line) for p in shards for line in p.read_text().splitlines()]
    assert [r["id"] for r in rows] == [f"c{i}" for i in range(5)]
    first = rows[0]["messages"]
    assert [m["role"] for m in first] == [r for r, _ in CONVERSATIONS[0]]
    assert [m["content"] for m in first if m["role"] != "assistant"] == [t for r, t in CONVERSATIONS[0]
                                                                         if r != "assistant"]
    # the first answer is the target's greedy continuation of the prompt, exactly
    prompt = chat_tokenizer.apply_chat_template(first[:2], tokenize=False, add_generation_prompt=True)
    ids = torch.tensor([chat_tokenizer(prompt, add_special_tokens=False)["input_ids"]])
    greedy = target.generate(ids, attention_mask=torch.ones_like(ids), max_new_tokens=6, do_sample=False,
                             pad_token_id=chat_tokenizer.pad_token_id)[0, ids.shape[1]:]
    assert first[2]["content"] == chat_tokenizer.decode(greedy, skip_special_tokens=True)
    assert first[2]["content"] != CONVERSATIONS[0][2][1]
    # a rerun rewrites no shard that exists (a killed run resumes at the first missing one)
    stamp = {p: p.stat().st_mtime_ns for p in shards}
    shards[2].unlink()
    regenerate(source, target, tokenizer_of(target), folder, cfg)
    assert all(p.stat().st_mtime_ns == stamp[p] for p in shards[:2]) and shards[2].exists()
    assert len(list(Messages(path=str(folder)).documents())) == 5  # read back as a data source
