"""MT-Bench (Zheng et al., 2023): 80 two-turn questions in 8 categories, the target answering turn 1 before turn 2.

Two published schemas, told apart by their columns:
    FastChat's fastchat/llm_judge/data/mt_bench/question.jsonl: question_id, category, turns[2] (reference on some)
    HuggingFaceH4/mt_bench_prompts (split train): prompt_id, category, prompt[2], reference
"""

from __future__ import annotations

from dataclasses import dataclass

from framework.workloads.rows import id_of, text_of, turns_of, where
from framework.workloads.suite import BenchPrompt, read_rows

CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


@dataclass(frozen=True)
class Schema:
    id: str
    turns: str
    origin: str  # where the schema is published, for the refusal that names both

    @property
    def columns(self) -> tuple[str, ...]:
        return (self.id, "category", self.turns)


SCHEMAS = (Schema("question_id", "turns", "FastChat question.jsonl"),
           Schema("prompt_id", "prompt", "HuggingFaceH4/mt_bench_prompts"))


def schema_of(columns: list[str], source: str) -> Schema:
    for schema in SCHEMAS:
        if set(schema.columns) <= set(columns):
            return schema
    known = "; ".join(f"{s.origin}: {', '.join(s.columns)}" for s in SCHEMAS)
    raise ValueError(f"{source}: not an MT-Bench file: it needs the columns of one schema ({known}); it has {columns}")


@dataclass
class MTBench:
    """MT-Bench's questions, both turns each; category = the question's MT-Bench category."""

    source: str = "HuggingFaceH4/mt_bench_prompts"
    split: str = "train"
    name: str = "mt_bench"

    def prompts(self) -> list[BenchPrompt]:
        rows = read_rows(self.source, self.split, None, ("category",), self.name)
        schema = schema_of(rows.column_names, self.source)
        prompts = []
        for i, row in enumerate(rows):
            at = where(self.source, i)
            prompts.append(BenchPrompt(id_of(row, schema.id, at), text_of(row, "category", at),
                                       turns_of(row, schema.turns, at)))
        return prompts

    def describe(self) -> dict:
        return {"suite": self.name, "source": self.source, "split": self.split, "config": None}
