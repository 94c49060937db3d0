"""REST's datastore: a tokenized corpus, its suffix array, and the continuations of a context.

The documents sit end to end, each followed by SEPARATOR, so no match and no continuation runs
from one document into the next. The longest suffix of the context found in the corpus (at most
max_len tokens, then shorter) selects a range of the suffix array; up to max_matches of its
occurrences are read, evenly spaced over the range, and what follows each is counted.

Built from text (`build_datastore`), the datastore is cached in a folder (tokens.npy,
suffix_array.npy, meta.json) and reused after; it remembers the tokenizer's fingerprint and
refuses a target with another tokenizer. `Datastore.from_token_ids` builds one from token ids
(targets without a tokenizer, the exact harness).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
import weakref
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

from framework.core import files
from framework.core.path_tree import WeightedPaths
from framework.core.renamed import renamed
from framework.lm.text import tokenizer_of
from proposers.rest.sources import TextSource, text_source
from proposers.rest.suffix_array import PrefixIndex, suffix_array

SEPARATOR = -1  # ends every document; below every token id, never part of a context
END = np.array([SEPARATOR], dtype=np.int32)
FORMAT = 1  # of the cache folder


@dataclass
class Match:
    length: int  # tokens of the context matched
    lo: int  # suffix-array rows [lo, hi) start with them
    hi: int


@dataclass(eq=False)
class Datastore:
    tokens: np.ndarray  # [n] int32: documents, each followed by SEPARATOR
    suffix_array: np.ndarray  # [n] int32/int64: suffix starts in lexicographic order
    vocab_size: int  # every token id is below it
    fingerprint: str | None = None  # the tokenizer's (None: built from token ids)
    source: str = "token ids"
    accepted: weakref.WeakSet = field(default_factory=weakref.WeakSet, init=False, repr=False)  # models already checked
    index: PrefixIndex | None = field(default=None, init=False, repr=False)  # made once (prefix_index)

    def __post_init__(self):
        if self.num_tokens == 0:
            raise ValueError(f"the REST datastore from {self.source!r} holds no tokens")

    @property
    def num_tokens(self) -> int:
        """Tokens of text, separators left out."""
        return int(np.count_nonzero(self.tokens != SEPARATOR))

    @classmethod
    def from_token_ids(cls, documents: Sequence[Sequence[int]], vocab_size: int | None = None,
                       source: str = "token ids") -> "Datastore":
        docs = [[int(t) for t in doc] for doc in documents]
        if any(t < 0 for doc in docs for t in doc):
            raise ValueError(f"the REST datastore from {source!r} has negative token ids")
        tokens = concatenate(docs)
        top = int(tokens.max()) + 1 if tokens.size else 0
        if vocab_size is not None and top > vocab_size:
            raise ValueError(f"the REST datastore from {source!r} holds token id {top - 1} >= vocab_size {vocab_size}")
        return cls(tokens, suffix_array(tokens), vocab_size or top, None, source)

    def prefix_index(self) -> PrefixIndex:
        """The packed prefixes searches start from, made once (~0.3 s for the zoo's corpus): for_model makes it at a
        proposer's prefill, so that a decoding step never pays for it."""
        if self.index is None:
            self.index = PrefixIndex(self.tokens, self.suffix_array)
        return self.index

    def longest_matches(self, tokens: torch.Tensor, lengths: torch.Tensor, max_len: int = 16,
                        min_len: int = 1) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """tokens [B, C] (row b: its first lengths[b] tokens) -> per row, the longest suffix (min_len..max_len
        tokens) that occurs in the corpus: its length [B] (0: none) and the suffix-array rows [lo, hi) [B]."""
        corpus, order, index = self.tokens, self.suffix_array, self.prefix_index()
        tokens, lengths = tokens.cpu().numpy(), lengths.cpu().numpy()
        B, span = tokens.shape[0], np.arange(max_len)
        rows = np.arange(B)[:, None]
        # the last tokens
        context = tokens[rows, np.clip(lengths[:, None] - max_len + span, 0, max(tokens.shape[1] - 1, 0))]
        available = np.minimum(lengths, max_len)

        def pattern(m: np.ndarray) -> np.ndarray:  # [B, max_len]: each row's last m tokens first
            return context[rows, np.minimum(max_len - m[:, None] + span, max_len - 1)]

        def occurs(m: np.ndarray) -> np.ndarray:  # [B]: do the last m tokens occur?
            lo = np.minimum(index.bounds(pattern(m), m), order.shape[0] - 1)
            head = corpus.take(order[lo][:, None] + span, mode="clip")
            return ((head == pattern(m)) | (span >= m[:, None])).all(axis=1)

        # If the last m tokens occur, so do the last m - 1 (inside that occurrence): bisect on m, every row at once.
        low = np.full(B, min_len, dtype=np.int64)
        found = (available >= min_len) & occurs(low)
        high = np.where(found, available, low)
        while (low < high).any():
            mid = (low + high + 1) // 2
            there = occurs(mid)
            low, high = np.where(there, mid, low), np.where(there, high, mid - 1)
        lo, hi = index.bounds(pattern(low), low), index.bounds(pattern(low), low, upper=True)
        return np.where(found, low, 0), np.where(found, lo, 0), np.where(found, hi, 0)

    @renamed(num_tokens="depth")  # the proposer's knob, passed on (num_tokens is the corpus' size here)
    def batched_continuations(self, tokens: torch.Tensor, lengths: torch.Tensor, depth: int,
                              max_matches: int = 256, max_len: int = 16, min_len: int = 1) -> WeightedPaths:
        """Per row: what followed up to max_matches occurrences of its longest match (up to `depth` tokens each,
        weight 1 per occurrence read: [B, M <= max_matches, depth], -1 padded)."""
        length, lo, hi = self.longest_matches(tokens, lengths, max_len, min_len)
        count = hi - lo
        read = np.minimum(count, max_matches)  # [B]
        # The range is sorted by what follows: evenly spaced rows keep the counts' proportions.
        j = np.arange(max(int(read.max(initial=0)), 1))  # [M] no wider than the most any row reads
        at = lo[:, None] + (j * count[:, None]) // np.maximum(read, 1)[:, None]  # [B, M]
        starts = self.suffix_array.take(at, mode="clip").astype(np.int64) + length[:, None]
        # The corpus ends with SEPARATOR, so reading past its end reads a separator.
        window = self.tokens.take(starts[..., None] + np.arange(depth), mode="clip").astype(np.int64)  # [B, M, T]
        run = np.cumprod(window != SEPARATOR, axis=2).astype(bool)  # tokens before a separator
        weights = ((j < read[:, None]) & run[:, :, 0]).astype(np.float64)
        return WeightedPaths(torch.from_numpy(np.where(run, window, -1)), torch.from_numpy(weights))

    def longest_match(self, context: Sequence[int], max_len: int = 16, min_len: int = 1) -> Match | None:
        """The longest suffix of `context` (min_len..max_len tokens) that occurs in the corpus."""
        length, lo, hi = self.longest_matches(*one_row(context), max_len, min_len)
        return Match(int(length[0]), int(lo[0]), int(hi[0])) if length[0] else None

    @renamed(num_tokens="depth")
    def continuations(self, context: Sequence[int], depth: int, max_matches: int = 256,
                      max_len: int = 16, min_len: int = 1) -> Counter:
        """(up to `depth` tokens after an occurrence of the longest match) -> occurrences read."""
        found = self.batched_continuations(*one_row(context), depth, max_matches, max_len, min_len)
        return Counter(tuple(t for t in path if t >= 0)
                       for path, w in zip(found.tokens[0].tolist(), found.weights[0].tolist()) if w)

    def for_model(self, model) -> "Datastore":
        """This datastore, after checking that it fits the model (tokenizer and vocabulary)."""
        if model in self.accepted:
            return self
        if self.fingerprint is not None:
            tokenizer = tokenizer_of(model)
            if tokenizer is None:
                raise ValueError(f"the REST datastore from {self.source!r} was built with a tokenizer, but the target "
                                 "has none (no tokenizer.json beside its checkpoint); use Datastore.from_token_ids")
            if tokenizer_fingerprint(tokenizer) != self.fingerprint:
                raise ValueError(f"the REST datastore from {self.source!r} was built with another tokenizer "
                                 f"({self.fingerprint[:16]}) than the target's "
                                 f"({tokenizer_fingerprint(tokenizer)[:16]})")
        vocab = model.get_output_embeddings().weight.shape[0]
        if self.vocab_size > vocab:
            raise ValueError(f"the REST datastore from {self.source!r} has a vocabulary of {self.vocab_size} tokens, "
                             f"the target's has {vocab}")
        self.prefix_index()
        self.accepted.add(model)
        return self

    def save(self, folder: Path, meta: dict) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        np.save(folder / "tokens.npy", self.tokens)
        np.save(folder / "suffix_array.npy", self.suffix_array)
        files.write_json(folder / "meta.json", meta)

    @classmethod
    def load(cls, folder: Path, meta: dict) -> "Datastore":
        return cls(np.load(folder / "tokens.npy"), np.load(folder / "suffix_array.npy"), meta["vocab_size"],
                   meta["fingerprint"], meta["settings"]["source"])


def one_row(context: Sequence[int]) -> tuple[torch.Tensor, torch.Tensor]:
    """One context as a batch of one: tokens [1, max(len, 1)] and lengths [1]."""
    tokens = torch.tensor([[int(t) for t in context] or [0]], dtype=torch.long)
    return tokens, torch.tensor([len(context)])


def concatenate(documents: Sequence[Sequence[int]]) -> np.ndarray:
    """[n] int32: the non-empty documents, each followed by SEPARATOR."""
    parts = [piece for doc in documents if len(doc) for piece in (np.asarray(doc, dtype=np.int32), END)]
    return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32)


def tokenizer_fingerprint(tokenizer) -> str:
    """sha256 of what maps text to ids: the fast tokenizer's serialisation (minus padding and
    truncation, which calls may change), else the sorted vocabulary."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    if backend is not None:
        spec = json.loads(backend.to_str())
        spec.pop("padding", None)
        spec.pop("truncation", None)
    else:
        spec = sorted(tokenizer.get_vocab().items())
    return hashlib.sha256(json.dumps(spec, sort_keys=True).encode()).hexdigest()


def default_cache_dir() -> Path:
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "speculum" / "rest"


def cache_folder(text: TextSource, max_tokens: int | None, cache_dir: str | Path | None) -> tuple[Path, dict]:
    settings = {**text.settings, "max_tokens": max_tokens}
    digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:12]
    root = Path(cache_dir).expanduser() if cache_dir is not None else default_cache_dir()
    return root / f"{text.label}-{digest}", settings


def build_datastore(source: str, tokenizer, cache_dir: str | Path | None = None, text_column: str = "text",
                    split: str = "train", max_tokens: int | None = None, batch_size: int = 64,
                    rebuild: bool = False) -> Datastore:
    """The datastore of `source` ("zoo" or a local path) tokenized by `tokenizer`: loaded from its
    cache folder under cache_dir (default ~/.cache/speculum/rest), or built there on first use.

    max_tokens keeps only the first tokens (documents in order, the last one cut); rebuild=True
    builds anew even if a cache exists.
    """
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens must be >= 1 (or null for all), got {max_tokens}")
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    text = text_source(source, text_column, split)
    folder, settings = cache_folder(text, max_tokens, cache_dir)
    fingerprint = tokenizer_fingerprint(tokenizer)
    meta_path = folder / "meta.json"
    if meta_path.is_file() and not rebuild:
        meta = files.read_json(meta_path)
        if meta.get("format") == FORMAT and meta.get("stamp") == text.stamp:
            if meta["fingerprint"] != fingerprint:
                raise ValueError(
                    f"the REST datastore in {folder} was built with another tokenizer ({meta['tokenizer']}, "
                    f"sha256 {meta['fingerprint'][:16]}) than this one "
                    f"({getattr(tokenizer, 'name_or_path', '?')}, sha256 "
                    f"{fingerprint[:16]}); delete that folder or pass rebuild=true (proposer.datastore.rebuild=true) "
                    "to rebuild it for this tokenizer, or give another cache_dir to keep both")
            return Datastore.load(folder, meta)
        # another format, or the source's files changed: the cache is stale, build anew
    start = time.perf_counter()
    tokens, documents = tokenize(text.dataset(), text_column, tokenizer, max_tokens, batch_size, source)
    if documents == 0:
        raise ValueError(f"the REST source {source!r} holds no text (split {split!r}, column {text_column!r})")
    bar = tqdm(desc="REST datastore: suffix array", unit=" rounds")
    suffixes = suffix_array(tokens, on_round=lambda span: bar.update())
    bar.close()
    store = Datastore(tokens, suffixes.astype(np.int32), len(tokenizer), fingerprint, settings["source"])
    meta = {"format": FORMAT, "settings": settings, "stamp": text.stamp, "fingerprint": fingerprint,
            "tokenizer": getattr(tokenizer, "name_or_path", "?"), "vocab_size": len(tokenizer),
            "num_tokens": store.num_tokens, "num_documents": documents,
            "build_s": round(time.perf_counter() - start, 1)}
    publish(store, meta, folder)
    return store


def tokenize(dataset, column: str, tokenizer, max_tokens: int | None, batch_size: int,
             source: str) -> tuple[np.ndarray, int]:
    """[n] int32 tokens of the column's texts (SEPARATOR after each), and how many documents they hold."""
    parts: list[np.ndarray] = []
    total = 0
    with tqdm(total=len(dataset), desc=f"REST datastore: tokenizing {source}", unit=" docs") as bar:
        for batch in dataset.iter(batch_size):
            texts = [text for text in batch[column] if text]  # empty or missing: no document
            for ids in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"] if texts else []:
                ids = ids if max_tokens is None else ids[: max_tokens - total]
                if ids:
                    parts.append(np.asarray(ids, dtype=np.int32))
                    total += len(ids)
            bar.update(len(batch[column]))
            if max_tokens is not None and total >= max_tokens:
                break
    return concatenate(parts), len(parts)


def publish(store: Datastore, meta: dict, folder: Path) -> None:
    """Write the cache beside the folder, then move it in: a reader never sees half a datastore."""
    partial = folder.with_name(f"{folder.name}.building-{os.getpid()}")
    shutil.rmtree(partial, ignore_errors=True)
    store.save(partial, meta)
    shutil.rmtree(folder, ignore_errors=True)
    try:
        os.replace(partial, folder)
    except OSError:  # another process published it first: theirs is as good
        shutil.rmtree(partial, ignore_errors=True)


@dataclass
class DatastoreSource:
    """A datastore to build from text with the target's own tokenizer, at the proposer's prefill:
    what a Hydra config names (the tokenizer comes from the target). Built or loaded once per
    tokenizer, then shared by every proposer made from the same config."""

    source: str = "zoo"
    cache_dir: str | None = None
    text_column: str = "text"
    split: str = "train"
    max_tokens: int | None = None
    batch_size: int = 64
    rebuild: bool = False
    stores: dict = field(default_factory=dict, init=False, repr=False, compare=False)  # fingerprint -> Datastore
    models: weakref.WeakKeyDictionary = field(default_factory=weakref.WeakKeyDictionary, init=False, repr=False,
                                              compare=False)  # model -> its Datastore

    def open(self, tokenizer) -> Datastore:
        key = tokenizer_fingerprint(tokenizer)
        if key not in self.stores:
            self.stores[key] = build_datastore(self.source, tokenizer, self.cache_dir, self.text_column, self.split,
                                               self.max_tokens, self.batch_size, self.rebuild)
        return self.stores[key]

    def for_model(self, model) -> Datastore:
        if model not in self.models:
            tokenizer = tokenizer_of(model)
            if tokenizer is None:
                raise ValueError(f"the REST datastore from {self.source!r} is built from text with the target's "
                                 "tokenizer, but the target has none (no tokenizer.json beside its checkpoint); "
                                 "give a datastore of token ids (proposers.rest.datastore.Datastore.from_token_ids)")
            self.models[model] = self.open(tokenizer).for_model(model)
        return self.models[model]
