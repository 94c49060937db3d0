"""The single-turn sets speculative-decoding papers report beside Spec-Bench: GSM8K, MATH-500, HumanEval, MBPP.

Each is one category (its name) unless a subject is natural (MATH-500's, optional). Hub ids and columns:
    GSM8K      openai/gsm8k, config main, split test: question, answer (no id: the row number)
    MATH-500   HuggingFaceH4/MATH-500, split test: problem, solution, answer, subject, level, unique_id
    HumanEval  openai/openai_humaneval, split test: task_id, prompt, canonical_solution, test, entry_point
    MBPP       google-research-datasets/mbpp, config full (task_id, text, code, test_list, ...) or sanitized
               (task_id, prompt, code, test_imports, test_list, ...), split test
"""

from __future__ import annotations

from dataclasses import dataclass

from framework.workloads.rows import as_turns, id_of, text_of, where
from framework.workloads.suite import BenchPrompt, read_rows


@dataclass
class GSM8K:
    source: str = "openai/gsm8k"
    split: str = "test"
    config: str | None = "main"
    name: str = "gsm8k"

    def prompts(self) -> list[BenchPrompt]:
        rows = read_rows(self.source, self.split, self.config, ("question",), self.name)
        return [BenchPrompt(str(i), "gsm8k", (text_of(row, "question", where(self.source, i)),))
                for i, row in enumerate(rows)]

    def describe(self) -> dict:
        return {"suite": self.name, "source": self.source, "split": self.split, "config": self.config}


@dataclass
class MATH500:
    """MATH-500's problems: one category, `math500`, or (by_subject) the problem's subject, e.g. Algebra."""

    source: str = "HuggingFaceH4/MATH-500"
    split: str = "test"
    by_subject: bool = False
    name: str = "math500"

    def prompts(self) -> list[BenchPrompt]:
        columns = ("unique_id", "problem", *(("subject",) if self.by_subject else ()))
        rows = read_rows(self.source, self.split, None, columns, self.name)
        prompts = []
        for i, row in enumerate(rows):
            at = where(self.source, i)
            category = text_of(row, "subject", at) if self.by_subject else "math500"
            prompts.append(BenchPrompt(id_of(row, "unique_id", at), category, (text_of(row, "problem", at),)))
        return prompts

    def describe(self) -> dict:
        return {"suite": self.name, "source": self.source, "split": self.split, "config": None,
                "by_subject": self.by_subject}


@dataclass
class HumanEval:
    """HumanEval's prompts as they are (a signature and docstring): completion mode continues the code, a chat
    template wraps the same text as the user's message."""

    source: str = "openai/openai_humaneval"
    split: str = "test"
    name: str = "humaneval"

    def prompts(self) -> list[BenchPrompt]:
        rows = read_rows(self.source, self.split, None, ("task_id", "prompt"), self.name)
        prompts = []
        for i, row in enumerate(rows):
            at = where(self.source, i)
            prompts.append(BenchPrompt(id_of(row, "task_id", at), "humaneval", (text_of(row, "prompt", at),)))
        return prompts

    def describe(self) -> dict:
        return {"suite": self.name, "source": self.source, "split": self.split, "config": None}


# The task's column in each MBPP configuration (the rest of the schema is shared).
MBPP_TASK_COLUMNS = {"full": "text", "sanitized": "prompt"}


@dataclass
class MBPP:
    """MBPP's problems, each stated with the tests its solution must pass (as the MBPP paper prompts: the task,
    then the asserts, which also fix the function's name and signature)."""

    source: str = "google-research-datasets/mbpp"
    split: str = "test"
    config: str | None = "full"  # full | sanitized; a local file is told apart by its columns
    name: str = "mbpp"

    def prompt(self, task: str, tests: tuple[str, ...], imports: tuple[str, ...]) -> str:
        return f"{task}\nThe function is checked by these tests:\n" + "\n".join((*imports, *tests))

    def prompts(self) -> list[BenchPrompt]:
        rows = read_rows(self.source, self.split, self.config, ("task_id", "test_list"), self.name)
        task_column = next((c for c in MBPP_TASK_COLUMNS.values() if c in rows.column_names), None)
        if task_column is None:
            known = ", ".join(f"{column!r} ({config})" for config, column in MBPP_TASK_COLUMNS.items())
            raise ValueError(f"{self.source}: not in the mbpp schema: no task column {known} "
                             f"(it has {rows.column_names})")
        prompts = []
        for i, row in enumerate(rows):
            at = where(self.source, i)
            imports = as_turns(row["test_imports"], "test_imports", at) if row.get("test_imports") else ()
            text = self.prompt(text_of(row, task_column, at), as_turns(row["test_list"], "test_list", at), imports)
            prompts.append(BenchPrompt(id_of(row, "task_id", at), "mbpp", (text,)))
        return prompts

    def describe(self) -> dict:
        return {"suite": self.name, "source": self.source, "split": self.split, "config": self.config}
