"""The zoo's own prompt sets (framework.zoo.prompts): held-out stdlib code, four categories, raw completion."""

from __future__ import annotations

from dataclasses import dataclass

from framework.workloads.suite import BenchPrompt
from framework.zoo.prompts import CATEGORIES, stdlib_prompt_sets


@dataclass
class ZooPrompts:
    name: str = "zoo"

    def prompts(self) -> list[BenchPrompt]:
        sets = stdlib_prompt_sets()
        return [BenchPrompt(row["id"], category, (row["prompt"],)) for category in CATEGORIES for row in sets[category]]

    def describe(self) -> dict:
        return {"suite": self.name, "source": "framework.zoo.prompts (held-out stdlib files of this interpreter)"}
