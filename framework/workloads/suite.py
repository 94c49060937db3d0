"""A benchmark suite: prompts in categories, read from a published schema (Hydra group `workload=`).

A suite reads its rows through `datasets` from a local file (json, jsonl, parquet) or a hub id, and
turns each into a `BenchPrompt`: the user's turns as text, its category, an id. How the text becomes
tokens (chat template or raw completion) is the workload's rendering (framework.workloads.render),
never the suite's: the same file is measured chat-wrapped or in completion mode by one setting.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Protocol

import datasets

from framework.data.sources import load_rows


@dataclass(frozen=True)
class BenchPrompt:
    id: str  # stable within its suite (the schema's own id where it has one)
    category: str
    turns: tuple[str, ...]  # the user's messages; a later turn follows the target's own answer to the one before
    system: str | None = None  # the suite's own system prompt, if its schema carries one

    def __post_init__(self) -> None:
        if not self.turns or not all(isinstance(t, str) and t for t in self.turns):
            raise ValueError(f"prompt {self.id!r} ({self.category}): every turn must be non-empty text, "
                             f"got {self.turns!r}")


class Suite(Protocol):
    name: str  # how results name the suite

    def prompts(self) -> list[BenchPrompt]:
        """Every prompt of the suite, in a fixed order (the file's)."""
        ...

    def describe(self) -> dict:
        """What was read (recorded with every result)."""
        ...


def read_rows(source: str, split: str, name: str | None, columns: tuple[str, ...], suite: str) -> datasets.Dataset:
    """The rows of a local file or hub id, refused by name when a column the schema needs is missing."""
    if not source:
        raise ValueError(f"workload={suite} needs workload.suite.source: a local json/jsonl/parquet file or a hub id")
    rows = load_rows(source, split, name=name)
    missing = [c for c in columns if c not in rows.column_names]
    if missing:
        raise ValueError(f"{source}: not in the {suite} schema: no {missing} column (it has {rows.column_names})")
    return rows


def by_category(prompts: list[BenchPrompt]) -> dict[str, list[BenchPrompt]]:
    """Categories in the order they first appear, each with its prompts in file order."""
    groups: dict[str, list[BenchPrompt]] = defaultdict(list)
    for prompt in prompts:
        groups[prompt.category].append(prompt)
    return dict(groups)
