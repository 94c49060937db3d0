"""Spec-Bench (Xia et al., 2024): 480 questions in six tasks, the speculative-decoding papers' common table.

The file is data/spec_bench/question.jsonl of github.com/hemingkx/Spec-Bench (no hub copy: give its path),
in FastChat's MT-Bench schema: question_id (a number), category, turns, reference on some rows.
    multi-turn conversation  MT-Bench's 80 questions (ids 81-160), both turns, in MT-Bench's own 8 categories
    translation, summarization, qa, math_reasoning, rag   80 single-turn questions each
"""

from __future__ import annotations

from dataclasses import dataclass

from framework.workloads import mt_bench
from framework.workloads.rows import id_of, text_of, turns_of, where
from framework.workloads.suite import BenchPrompt, read_rows

TASKS = ("translation", "summarization", "qa", "math_reasoning", "rag")
MT_BENCH = "mt_bench"


@dataclass
class SpecBench:
    """Spec-Bench's questions. `mt_bench_as_one` (default) files MT-Bench's 8 categories under one category,
    `mt_bench`, as the paper's table reports multi-turn conversation as one task; off, they stay apart."""

    source: str = ""  # a local copy of data/spec_bench/question.jsonl (json, jsonl or parquet)
    split: str = "train"  # a local file is one split
    mt_bench_as_one: bool = True
    name: str = "spec_bench"

    def category(self, category: str) -> str:
        return MT_BENCH if self.mt_bench_as_one and category in mt_bench.CATEGORIES else category

    def prompts(self) -> list[BenchPrompt]:
        rows = read_rows(self.source, self.split, None, ("question_id", "category", "turns"), self.name)
        prompts = []
        for i, row in enumerate(rows):
            at = where(self.source, i)
            prompts.append(BenchPrompt(id_of(row, "question_id", at), self.category(text_of(row, "category", at)),
                                       turns_of(row, "turns", at)))
        return prompts

    def describe(self) -> dict:
        return {"suite": self.name, "source": self.source, "split": self.split, "config": None,
                "mt_bench_as_one": self.mt_bench_as_one}
