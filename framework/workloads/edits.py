"""A repetitive workload: a series of edit requests over the same held-out stdlib code (workload=edits).

What agents and code-edit tools send: the same file region again and again with a small change. Each base is a
code_continuation prompt of the zoo's sets (a window of a held-out file, cut at a line boundary); its `variants`
requests each rename one identifier of the window (a different one, or a different new name), so the target's
continuations of one base are near copies of each other and of nothing in their own prompt. Requests come base by
base, variants in a row, so a drafter that remembers earlier outputs (proposer=suffix's global cache) meets the
repetition a prompt-only one cannot see. Deterministic: a `random.Random(seed)`.
"""

from __future__ import annotations

import io
import keyword
import random
import tokenize
from dataclasses import dataclass

from framework.workloads.suite import BenchPrompt
from framework.zoo.prompts import rename, stdlib_prompt_sets

CATEGORY = "edit_series"


def identifiers(code: str) -> list[str]:
    """The window's identifiers used at least twice (not keywords, not attributes), in order of first use."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return []
    names, previous = [], None
    for tok in tokens:
        if tok.type == tokenize.NAME and not keyword.iskeyword(tok.string) \
                and not (previous and previous.string == "."):
            names.append(tok.string)
        if tok.type not in (tokenize.NL, tokenize.COMMENT):
            previous = tok
    return [n for n in dict.fromkeys(names) if names.count(n) >= 2 and len(n) > 1]


@dataclass
class EditSeries:
    bases: int = 5  # code windows edited
    variants: int = 8  # requests per window
    seed: int = 0
    name: str = "edits"

    def __post_init__(self) -> None:
        if self.bases < 1 or self.variants < 2:
            raise ValueError(f"an edit series needs bases >= 1 and variants >= 2, got {self.bases}, {self.variants}")

    def prompts(self) -> list[BenchPrompt]:
        rng, out = random.Random(self.seed), []
        for row in stdlib_prompt_sets()["code_continuation"]:
            code = row["prompt"]
            names = identifiers(code)
            if len(out) == self.bases * self.variants or not names:
                continue
            series = []
            for k in range(self.variants):
                old = names[k % len(names)]
                edited = rename(code, old, f"{old}_{rng.choice(['v', 'new', 'alt', 'x'])}{k}")
                if edited is None or edited == code:
                    break
                series.append(BenchPrompt(f"{CATEGORY}/{row['id']}/{k}:{old}", CATEGORY, (edited,)))
            if len(series) == self.variants:
                out += series
        if len(out) < self.bases * self.variants:
            raise ValueError(f"workload=edits: only {len(out) // self.variants} of {self.bases} held-out windows "
                             "could be edited on this interpreter's stdlib")
        return out

    def describe(self) -> dict:
        return {"suite": self.name, "bases": self.bases, "variants": self.variants, "seed": self.seed,
                "source": "framework.zoo.prompts code_continuation windows, one identifier renamed per request"}
