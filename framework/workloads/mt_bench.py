"""MT-Bench (Zheng et al., 2023): 80 two-turn questions in 8 categories, the target answering turn 1 before turn 2.

Two published schemas, told apart by their columns:
    FastChat's fastchat/llm_judge/data/mt_bench/question.jsonl: question_id, category, turns[2] (reference on some)
    HuggingFaceH4/mt_bench_prompts (split train): prompt_id, category, prompt[2], reference

The row readers below are shared by every published suite (Spec-Bench and SPEED-Bench extend this schema):
a row that cannot be read is refused by its file, row number and field.
"""

from __future__ import annotations

from dataclasses import dataclass

from framework.workloads.suite import BenchPrompt, read_rows

CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


def where(source: str, row: int) -> str:
    return f"{source} row {row}"


def text_of(row: dict, field: str, at: str) -> str:
    """One non-blank text field of a row."""
    value = row.get(field)
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{at}: field {field!r} must be non-empty text, got {value!r:.80}")
    return value


def turns_of(row: dict, field: str, at: str) -> tuple[str, ...]:
    """A row's user turns: a non-empty list of non-blank texts."""
    return as_turns(row.get(field), field, at)


def as_turns(value, field: str, at: str) -> tuple[str, ...]:
    if not isinstance(value, (list, tuple)) or not value or not all(isinstance(t, str) and t.strip() for t in value):
        raise ValueError(f"{at}: field {field!r} must be a non-empty list of non-empty texts, got {value!r:.80}")
    return tuple(value)


def id_of(row: dict, field: str, at: str) -> str:
    """The schema's own id, as text (a null id is refused: it could not tell two prompts apart)."""
    value = row.get(field)
    if value is None or isinstance(value, (list, dict)) or str(value) == "":
        raise ValueError(f"{at}: field {field!r} must be an id (text or a number), got {value!r:.80}")
    return str(value)


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
