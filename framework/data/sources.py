"""Where training text comes from (Hydra group `data=`), and how it becomes token data for one tokenizer.

A source yields documents: plain text, or a conversation. Every file is read through `datasets`
(`load_dataset("json" | "parquet" | "text", data_files=...)`, or a hub id when no such local path
exists), so a local copy and the published dataset read the same way. A document's split is fixed by
a hash of its key (a path, a conversation id or its row number), the same on every machine:
"heldout" (untouched by any choice), "valid" (every `valid_every`-th remaining document: it picks
checkpoints) and "train".
"""

from __future__ import annotations

import glob
import hashlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

import datasets
from tqdm.auto import tqdm

from framework.data.chat import Message, encode, from_messages, from_sharegpt, render_chat, with_system
from framework.data.token_data import TokenData, load_splits, save_splits, tokenizer_hash


@dataclass(frozen=True)
class Document:
    key: str  # stable: decides the split
    text: str | None = None
    messages: tuple[Message, ...] | None = None


class DocumentSource(Protocol):
    def documents(self) -> Iterator[Document]: ...

    def describe(self) -> dict:
        """What was read (recorded with the data and in its cache key)."""
        ...


def heldout_score(key: str) -> float:
    """A stable number in [0, 1) per key: sha256, not hash(), which is salted per process."""
    return int.from_bytes(hashlib.sha256(key.encode("utf-8")).digest()[:8], "big") / 2**64


def local_files(path: str) -> list[str] | None:
    """The files a local path names (a file, a folder's data files, a glob), or None when nothing local matches."""
    p = Path(path).expanduser()
    if p.is_file():
        return [str(p)]
    if p.is_dir():
        found = sorted(str(f) for f in p.iterdir() if f.suffix in (".json", ".jsonl", ".parquet", ".txt", ".md", ".py"))
        if not found:
            raise ValueError(f"{p} holds no .json, .jsonl, .parquet or text files")
        return found
    matches = sorted(glob.glob(str(p), recursive=True)) if any(c in path for c in "*?[") else []
    return matches or None


def load_rows(path: str, split: str = "train", builder: str | None = None, name: str | None = None) -> datasets.Dataset:
    """Rows of a local file / folder / glob (json, jsonl, parquet) or, when no local path matches, a hub id
    (`name`: its configuration, e.g. gsm8k's "main"; `split` picks the hub set's split, a local file is one)."""
    found = local_files(path)
    if found is None:
        if Path(path).expanduser().is_absolute() or path.startswith("."):
            raise FileNotFoundError(f"no data at {path}")
        return datasets.load_dataset(path, name, split=split)  # a hub id (or a local dataset script)
    suffixes = {Path(f).suffix for f in found}
    if builder is None:
        if suffixes == {".jsonl"}:  # read here: each bad line named by file and line number
            return datasets.Dataset.from_list([row for f in found for row in json_lines(f)])
        if suffixes <= {".json", ".jsonl"}:
            builder = "json"
        elif suffixes == {".parquet"}:
            builder = "parquet"
        else:
            raise ValueError(f"{path}: mixed or unknown file kinds {sorted(suffixes)} (json, jsonl or parquet)")
    try:
        return datasets.load_dataset(builder, data_files=found, split="train")
    except Exception as error:  # noqa: BLE001 - the reader's own errors name no file
        raise ValueError(f"{path}: cannot be read as {builder} ({type(error).__name__}: {error})") from None


def json_lines(path: str) -> list[dict]:
    """The objects of a JSONL file (blank lines skipped); an empty file, a torn line or bad UTF-8 named by file and
    line."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise ValueError(f"{path}: not UTF-8 text (byte {error.start})") from None
    rows = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise ValueError(f"{path}:{number}: not a JSON line ({error.msg}; a torn or partial write?)") from None
        if not isinstance(row, dict):
            raise ValueError(f"{path}:{number}: a JSON line must be an object, got {type(row).__name__}")
        rows.append(row)
    if not rows:
        raise ValueError(f"{path}: holds no rows (an empty file)")
    return rows


@dataclass
class TextFiles:
    """Plain text files, each one document (a local file, folder or glob)."""

    paths: list[str] = field(default_factory=list)

    def documents(self) -> Iterator[Document]:
        if not self.paths:
            raise ValueError("data=text needs data.paths: files, folders or globs of plain text")
        found = [f for p in self.paths for f in (local_files(p) or [])]
        if not found:
            raise FileNotFoundError(f"no text files at {list(self.paths)}")
        rows = datasets.load_dataset("text", data_files=found, sample_by="document", split="train")
        for path, row in zip(found, rows, strict=True):
            yield Document(key=path, text=row["text"])

    def describe(self) -> dict:
        return {"kind": "text", "paths": list(self.paths)}


def checked_conversation(messages: list) -> list:
    """A conversation a template can render and a loss can read: the system prompt first if any, then a user turn
    before any answer, and no empty answer (a null value would train as an empty turn)."""
    talk = [m for m in messages if m.role != "system"]
    if any(m.role == "system" for m in messages[1:]):
        raise ValueError("a system message after the first turn")
    if talk and talk[0].role != "user":
        raise ValueError(f"the first turn is the {talk[0].role}'s: a conversation opens with a user turn")
    empty = [i for i, m in enumerate(messages) if m.role == "assistant" and not m.content.strip()]
    if empty:
        raise ValueError(f"assistant turn {empty[0]} is empty (or null): nothing to learn, and it would train as one")
    return messages


@dataclass
class Conversations:
    """Conversations in a published schema from a local file or a hub id; `limit` keeps the first rows."""

    path: str = ""
    split: str = "train"
    limit: int | None = None
    system_prompt: str | None = None
    schema = "messages"
    column = "messages"

    def turns(self, row: dict) -> list[Message]:
        return from_messages(row[self.column])

    def documents(self) -> Iterator[Document]:
        if not self.path:
            raise ValueError(f"data={self.schema} needs data.path: a local JSON/JSONL/Parquet file or a hub id")
        rows = load_rows(self.path, self.split)
        if self.column not in rows.column_names:
            raise ValueError(f"{self.path}: no {self.column!r} column ({self.schema} schema); "
                             f"it has {rows.column_names}")
        for i, row in enumerate(rows):
            if self.limit is not None and i >= self.limit:
                return
            key = str(row.get("id") or f"{self.path}#{i}")
            try:
                messages = checked_conversation(self.turns(row))
            except ValueError as error:
                raise ValueError(f"{self.path}, conversation {key}: {error}") from None
            yield Document(key=key, messages=tuple(with_system(messages, self.system_prompt)))

    def describe(self) -> dict:
        return {"kind": self.schema, "path": self.path, "split": self.split, "limit": self.limit,
                "system_prompt": self.system_prompt}


@dataclass
class Messages(Conversations):
    """The messages schema: `messages`: [{role, content}] (OpenAI, UltraChat, most hub sets)."""


@dataclass
class ShareGPT(Conversations):
    """The ShareGPT schema: `conversations`: [{from, value}] (what EAGLE and Medusa trained on)."""

    schema = "sharegpt"
    column = "conversations"

    def turns(self, row: dict) -> list[Message]:
        return from_sharegpt(row[self.column])


def tokenize(document: Document, tokenizer) -> tuple[list[int], list[bool]]:
    """(ids, mask): text as [EOS, ids...] with every token a label; a conversation as its chat template renders it."""
    if document.messages is not None:
        return render_chat(tokenizer, list(document.messages))
    separator = tokenizer.eos_token_id if tokenizer.eos_token_id is not None else tokenizer.bos_token_id
    ids = ([] if separator is None else [separator]) + encode(tokenizer, document.text or "")
    return ids, [True] * len(ids)


def tokenize_splits(source: DocumentSource, tokenizer, heldout_fraction: float = 0.05,
                    valid_every: int = 25) -> dict[str, TokenData]:
    """{"train", "valid", "heldout"} token data of every document of `source`."""
    parts: dict[str, list] = {"train": [], "valid": [], "heldout": []}
    kept = 0
    for document in tqdm(source.documents(), desc="tokenizing", leave=False):
        encoded = tokenize(document, tokenizer)
        if heldout_score(document.key) < heldout_fraction:
            parts["heldout"].append(encoded)
        else:
            parts["valid" if kept % valid_every == 0 else "train"].append(encoded)
            kept += 1
    empty = [name for name, docs in parts.items() if not docs]
    if empty:
        raise ValueError(f"{json.dumps(source.describe())}: no documents land in {empty} "
                         f"({sum(map(len, parts.values()))} in all; heldout_fraction {heldout_fraction}, "
                         f"valid_every {valid_every})")
    name = getattr(tokenizer, "name_or_path", "")
    return {split: TokenData.of_documents(docs, tokenizer, name) for split, docs in parts.items()}


def cached_splits(source: DocumentSource, tokenizer, root: str | Path, heldout_fraction: float = 0.05,
                  valid_every: int = 25) -> dict[str, TokenData]:
    """`tokenize_splits`, made once per (source, tokenizer, split settings) into root/data/ and checked on
    every read."""
    key = json.dumps({"source": source.describe(), "heldout_fraction": heldout_fraction, "valid_every": valid_every,
                      "tokenizer": tokenizer_hash(tokenizer), "template": getattr(tokenizer, "chat_template", None),
                      # 2: per-turn samples for templates that re-render, {% generation %} masks, BOS once
                      "labels": 2},
                     sort_keys=True)
    path = Path(root) / "data" / f"{source.describe()['kind']}-{hashlib.sha256(key.encode()).hexdigest()[:16]}.pt"
    splits = load_splits(path)
    if splits is None:
        splits = tokenize_splits(source, tokenizer, heldout_fraction, valid_every)
        save_splits(splits, path)
    for split, data in splits.items():
        data.check(tokenizer, f"{path}:{split}")
    return splits
