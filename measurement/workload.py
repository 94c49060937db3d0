"""The prompts a comparison times: a suite of conf/workload (or token ids), chosen per category and rendered
for the target (framework.workloads.render), and the later turns of multi-turn prompts, which follow the
target's own answer to the turn before (our plain decoding under the unit's sampling and seed, made once and
kept in the records).

A library of experiments.compare; not an entry point.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import torch
from hydra.utils import instantiate
from omegaconf import DictConfig

from framework.core.prompts import ragged_batch
from framework.lm.text import encode_prompt
from framework.workloads.render import Rendering
from framework.workloads.suite import BenchPrompt, by_category
from measurement.common import whole_number

CUSTOM = "prompts"  # the one category of experiment.prompts (token ids, for targets without a tokenizer)
THINK_START = "<think>"
THINK_END = "</think>"  # the end of a reasoning model's thinking span (Qwen3, DeepSeek-R1 and their kin)


@dataclass
class Workload:
    """Per category the prompts its batches draw from (the first `units` start a timed unit each), rendered
    for the target; turn 1 rendered once, later turns on demand (they need the answer before them)."""

    prompts: dict[str, list[BenchPrompt | list[int]]]
    units: dict[str, int]
    tokenizer: object = None
    rendering: Rendering = field(default_factory=Rendering)
    max_prompt_tokens: int | None = None
    description: dict = field(default_factory=dict)  # recorded with every result
    # (category, index, turn, the answers before it) -> its rendering, for prompts.jsonl: a later turn follows the
    # answers of the sampling it is timed under, so two samplings' turns are two renderings
    rendered: dict = field(default_factory=dict)

    def turns(self, category: str, index: int) -> int:
        """Turns timed: every one under a chat template; the first only in raw text, which has no roles."""
        prompt = self.prompts[category][index]
        if not isinstance(prompt, BenchPrompt) or self.rendering.mode(self.tokenizer) == "raw":
            return 1
        return len(prompt.turns)

    def ids(self, category: str, index: int, turn: int = 1, answer: Callable | None = None) -> torch.Tensor:
        """[1, L]: turn `turn` of the prompt, after the target's answers to the turns before it (answer(category,
        index, turn) -> text)."""
        prompt = self.prompts[category][index]
        if not isinstance(prompt, BenchPrompt):
            return encode_prompt(prompt, None)
        answers = tuple(answer(category, index, t) for t in range(1, turn))
        key = (category, index, turn, answers)
        if key not in self.rendered:
            rendered = self.rendering.render(self.tokenizer, prompt, answers)
            if self.max_prompt_tokens is not None and len(rendered.ids) > self.max_prompt_tokens:
                raise ValueError(f"prompt {prompt.id!r} turn {turn}: {len(rendered.ids)} tokens, over "
                                 f"workload.max_prompt_tokens={self.max_prompt_tokens}")
            self.rendered[key] = rendered
        return torch.tensor([self.rendered[key].ids])

    def batch(self, category: str, index: int, size: int, turn: int = 1,
              answer: Callable | None = None) -> torch.Tensor:
        """[size, L]: the prompts from `index` on that have this turn (wrapping around), each whole (-1 after a
        shorter one: framework/core/prompts.py). Size 1: the prompt as it is."""
        having = [i for i in range(len(self.prompts[category])) if self.turns(category, i) >= turn]
        start = having.index(index)
        return ragged_batch([self.ids(category, having[(start + j) % len(having)], turn, answer)[0]
                             for j in range(size)])

    def think_end(self) -> int | None:
        """The end-of-thinking token id when the rendered prompts open a reasoning model's thinking span."""
        template = getattr(self.tokenizer, "chat_template", None) or ""
        if self.tokenizer is None or THINK_END not in template or self.rendering.mode(self.tokenizer) != "chat" \
                or self.rendering.thinking is False:
            return None
        ids = self.tokenizer.convert_tokens_to_ids([THINK_END])
        return ids[0] if ids and ids[0] != self.tokenizer.unk_token_id else None


def quota(available: dict[str, int], total: int | None, per_category: int) -> dict[str, int]:
    """Prompts timed per category: per_category each, or `total` shared out in turn as evenly as they allow."""
    if total is None:
        return {c: min(per_category, n) for c, n in available.items()}
    taken = dict.fromkeys(available, 0)
    while sum(taken.values()) < total and any(taken[c] < n for c, n in available.items()):
        for c, n in available.items():
            if taken[c] < n and sum(taken.values()) < total:
                taken[c] += 1
    return taken


def fits(rendering: Rendering, tokenizer, prompt: BenchPrompt, limit: int) -> bool:
    return len(rendering.render(tokenizer, prompt).ids) <= limit


def build_workload(cfg: DictConfig, tokenizer, context: int | None) -> Workload:
    """experiment.prompts as token ids, or the configured suite: its categories (experiment.categories, null: all),
    the prompts that fit (the length cap, and the target's context less max_new_tokens), experiment.samples
    in all or experiment.per_category each."""
    exp = cfg.experiment
    if exp.prompts is not None:
        prompts = [list(p) for p in exp.prompts]
        for p in prompts:
            encode_prompt(p, None)  # refuses non-integers by name
        return Workload({CUSTOM: prompts}, {CUSTOM: len(prompts)}, description={"suite": "token ids"})
    if tokenizer is None:
        raise ValueError("the workload's prompts are text: the target needs a tokenizer beside its checkpoint "
                         "(e.g. models=zoo), or give experiment.prompts as token ids")
    node = cfg.workload
    suite, rendering = instantiate(node.suite), instantiate(node.render)
    groups = by_category(suite.prompts())
    wanted = list(exp.categories) if exp.categories is not None else list(groups)
    wrong = [c for c in wanted if c not in groups]
    if wrong:
        raise ValueError(f"unknown categories {wrong} in experiment.categories: "
                         f"workload {suite.name} has {list(groups)}")
    cap = (None if node.max_prompt_tokens is None
           else whole_number("workload.max_prompt_tokens", node.max_prompt_tokens, 1))
    limits = [n for n in (cap, context and context - exp.max_new_tokens) if n]
    limit = min(limits) if limits else None
    kept = {c: [p for p in groups[c] if limit is None or fits(rendering, tokenizer, p, limit)] for c in wanted}
    left_out = {c: len(groups[c]) - len(kept[c]) for c in wanted if len(groups[c]) > len(kept[c])}
    wanted = [c for c in wanted if kept[c]]  # a category none of whose prompts fits is left out (counted)
    if not wanted:
        raise ValueError(f"no prompt fits {limit} tokens (workload.max_prompt_tokens={node.max_prompt_tokens}; the "
                         f"target's context {context} less max_new_tokens {exp.max_new_tokens})")
    units = quota({c: len(kept[c]) for c in wanted}, exp.samples, exp.per_category)
    description = {**suite.describe(), "render": rendering.describe(tokenizer), "categories": units,
                   "max_prompt_tokens": limit, "left_out_too_long": left_out}
    if rendering.mode(tokenizer) == "raw" and any(len(p.turns) > 1 for c in wanted for p in kept[c][:units[c]]):
        description["later_turns"] = "left out: raw text has no roles (a chat template times every turn)"
    return Workload(kept, units, tokenizer, rendering, limit, description)


def answer_text(tokenizer, tokens: list[int]) -> str:
    """A turn's answer as the next turn's history: up to its end (the first special token other than the thinking
    span's; every method runs to its budget here, EOS off), its thinking left out as chat templates leave out past
    reasoning, without special tokens."""
    thinking = set(tokenizer.convert_tokens_to_ids([THINK_START, THINK_END]))
    special = set(getattr(tokenizer, "all_special_ids", []) or []) - thinking
    cut = next((i for i, t in enumerate(tokens) if t in special), len(tokens))
    tokens = tokens[:cut]
    end = tokenizer.convert_tokens_to_ids(THINK_END)
    if end in tokens:
        tokens = tokens[len(tokens) - tokens[::-1].index(end):]
    return tokenizer.decode(tokens, skip_special_tokens=True).strip()
