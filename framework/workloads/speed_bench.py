"""SPEED-Bench (NVIDIA, arXiv 2604.09557): speculative decoding across domains and input lengths.

The hub set nvidia/SPEED-Bench has one configuration per split, each with one split `test`:
    qualitative       880 prompts, 80 in each of 11 categories (coding, humanities, math, multilingual, qa, rag,
                      reasoning, roleplay, stem, summarization, writing)
    throughput_<len>  1536 prompts of ~len input tokens (1k 2k 8k 16k 32k), 512 in each entropy tier
                      (category low_entropy, mixed or high_entropy); here a prompt's category is "<len>/<tier>"
Columns: question_id, category, sub_category, turns (the user's turns), source, src_id, difficulty, multiturn.

About half the hub's rows are licence placeholders (their turns hold PLACEHOLDER): the prompts are rebuilt from
their sources by NVIDIA's scripts, Model-Optimizer's examples/specdec_bench/prepare_data.py (a parquet in the
same schema) or NeMo-Skills' speed-bench prepare.py (<config>.jsonl with `messages` [{role, content}] in place of
`turns`). Both read here; a placeholder row is refused, so a run never measures the placeholder text.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from framework.workloads.rows import as_turns, id_of, text_of, turns_of, where
from framework.workloads.suite import BenchPrompt, read_rows

PLACEHOLDER = "FULL BENCHMARK DATA SHOULD BE FETCHED FROM THE SOURCE USING SPECDEC_BENCH"
SPLITS = ("qualitative", "throughput")
LENGTHS = ("1k", "2k", "8k", "16k", "32k")
TIERS = {"low_entropy": "low", "mixed": "mixed", "high_entropy": "high"}  # the schema's tier -> the category's


def turns_of_messages(row: dict, at: str) -> tuple[tuple[str, ...], str | None]:
    """(user turns, system prompt) of a prepared row's messages; answers are refused (the target gives its own)."""
    messages = row.get("messages")
    if not isinstance(messages, (list, tuple)) or not all(isinstance(m, dict) for m in messages):
        raise ValueError(f"{at}: field 'messages' must be a list of {{role, content}}, got {messages!r:.80}")
    roles = [m.get("role") for m in messages]
    if any(role not in ("system", "user") for role in roles) or "system" in roles[1:]:
        raise ValueError(f"{at}: field 'messages' must hold user turns after at most one leading system message, "
                         f"got roles {roles}")
    system = text_of(messages[0], "content", f"{at} (field 'messages')") if roles[:1] == ["system"] else None
    users = [m.get("content") for m in messages if m.get("role") == "user"]
    return as_turns(users, "messages", at), system


@dataclass
class SpeedBench:
    """SPEED-Bench's qualitative split (its 11 categories) or one throughput bucket ("<length>/<tier>")."""

    source: str = "nvidia/SPEED-Bench"  # the hub set, or a prepared file (parquet or jsonl)
    split: str = "qualitative"  # qualitative | throughput
    length: str = "1k"  # throughput only: the input-length bucket (hub configuration throughput_<length>)
    name: str = "speed_bench"

    def __post_init__(self) -> None:
        if self.split not in SPLITS:
            raise ValueError(f"workload.suite.split must be one of {SPLITS} (SPEED-Bench's splits), got {self.split!r}")
        if self.length not in LENGTHS:
            raise ValueError(f"workload.suite.length must be one of {LENGTHS}, got {self.length!r}")

    @property
    def config(self) -> str:
        return self.split if self.split == "qualitative" else f"throughput_{self.length}"

    def check_file_name(self) -> None:
        """A prepared file is named by its configuration: one that names another bucket would mislabel every prompt."""
        named = re.search(r"(qualitative|throughput_\d+k)", Path(self.source).name)
        if named and named.group(1) != self.config:
            raise ValueError(f"{self.source}: the file name says {named.group(1)} but split={self.split} "
                             f"length={self.length} reads {self.config} (set workload.suite.split / .length)")

    def category(self, row: dict, at: str) -> str:
        category = text_of(row, "category", at)
        if self.split == "qualitative":
            return category
        if category not in TIERS:
            raise ValueError(f"{at}: field 'category' must be an entropy tier {tuple(TIERS)}, got {category!r}")
        return f"{self.length}/{TIERS[category]}"

    def prompts(self) -> list[BenchPrompt]:
        self.check_file_name()
        rows = read_rows(self.source, "test", self.config, ("question_id", "category"), self.name)
        turns_field = next((c for c in ("turns", "messages") if c in rows.column_names), None)
        if turns_field is None:
            raise ValueError(f"{self.source}: not in the {self.name} schema: no 'turns' (hub, prepare_data.py) or "
                             f"'messages' (NeMo-Skills prepare.py) column (it has {rows.column_names})")
        prompts = []
        for i, row in enumerate(rows):
            at = where(self.source, i)
            turns, system = (turns_of(row, "turns", at), None) if turns_field == "turns" else turns_of_messages(row, at)
            if any(PLACEHOLDER in turn for turn in turns):
                raise ValueError(f"{at}: field {turns_field!r} holds SPEED-Bench's licence placeholder, not a "
                                 "prompt: rebuild the file with NVIDIA's prepare script and give its path as "
                                 "workload.suite.source")
            prompts.append(BenchPrompt(id_of(row, "question_id", at), self.category(row, at), turns, system))
        return prompts

    def describe(self) -> dict:
        return {"suite": self.name, "source": self.source, "split": self.split, "config": self.config,
                "hub_split": "test"}
