"""The target's own answers to a dataset's questions: what makes a drafter match the target's law.

Published chat sets hold answers another model wrote; a drafter trained on them learns that model.
Here every assistant turn is rewritten by the target itself (Hugging Face `generate`, batched, left
padded), turn by turn, each conditioned on the conversation so far with the earlier answers already
regenerated. The output is the messages schema in JSONL shards of `shard_size` conversations, each
written whole: a killed run resumes at the first missing shard.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from tqdm.auto import tqdm

from framework.core import files
from framework.core.sampling import SamplingConfig, hf_sampling
from framework.data.chat import Message, encode, render_text
from framework.data.sources import Document, DocumentSource


@dataclass
class RegenerateConfig:
    max_new_tokens: int = 256
    temperature: float = 0.0  # 0 = greedy
    batch: int = 8
    shard_size: int = 64
    seed: int = 0


@torch.no_grad()
def answer(target, tokenizer, conversations: list[list[Message]], cfg: RegenerateConfig, seed: int) -> list[str]:
    """The target's answer after each conversation (which ends with a user turn), batched and left padded."""
    prompts = [encode(tokenizer, render_text(tokenizer, c, generation_prompt=True)) for c in conversations]
    width = max(map(len, prompts))
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id or 0
    ids = torch.tensor([[pad] * (width - len(p)) + p for p in prompts])  # [B, L]
    attention = torch.tensor([[0] * (width - len(p)) + [1] * len(p) for p in prompts])
    device = next(target.parameters()).device
    torch.manual_seed(seed)  # HF sampling draws from the global generator
    out = target.generate(ids.to(device), attention_mask=attention.to(device), max_new_tokens=cfg.max_new_tokens,
                          pad_token_id=pad, **hf_sampling(SamplingConfig(temperature=cfg.temperature)))[:, width:]
    return [tokenizer.decode(row, skip_special_tokens=True) for row in out.cpu()]


def regenerate_shard(target, tokenizer, documents: list[Document], cfg: RegenerateConfig, seed: int) -> list[dict]:
    conversations = [[] for _ in documents]
    turns = [list(d.messages) for d in documents]
    for position in range(max(map(len, turns))):  # turn by turn: answer p reads the regenerated answers before it
        asking = [i for i, t in enumerate(turns) if position < len(t) and t[position].role == "assistant"]
        for first in range(0, len(asking), cfg.batch):
            chunk = asking[first : first + cfg.batch]
            answers = answer(target, tokenizer, [conversations[i] for i in chunk], cfg, seed + position * 7919 + first)
            for i, text in zip(chunk, answers, strict=True):
                conversations[i].append(Message("assistant", text))
        for i, t in enumerate(turns):
            if position < len(t) and t[position].role != "assistant":
                conversations[i].append(t[position])
    return [{"id": d.key, "messages": [{"role": m.role, "content": m.content} for m in c]}
            for d, c in zip(documents, conversations, strict=True)]


def regenerate(source: DocumentSource, target, tokenizer, folder: str | Path,
               cfg: RegenerateConfig | None = None) -> Path:
    """Every conversation of `source` with the target's own answers, as messages-schema JSONL shards in `folder`."""
    cfg = cfg if cfg is not None else RegenerateConfig()  # a fresh one per call: the fields are mutable
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    documents = [d for d in source.documents() if d.messages is not None]
    if not documents:
        raise ValueError(f"{json.dumps(source.describe())} holds no conversations to regenerate")
    shards = range(0, len(documents), cfg.shard_size)
    for index, first in enumerate(tqdm(shards, desc="regenerating answers")):
        path = folder / f"shard_{index:05d}.jsonl"
        if path.exists():  # written whole by an earlier run
            continue
        rows = regenerate_shard(target, tokenizer, documents[first : first + cfg.shard_size], cfg, cfg.seed + first)
        files.write_text(path, "".join(json.dumps(row) + "\n" for row in rows))
    return folder
