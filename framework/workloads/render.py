"""A prompt rendered as the model expects it: the target tokenizer's chat template, or raw completion text.

    template: chat   the tokenizer's chat template with the generation prompt (system prompt optional,
                     thinking on/off where the template reads `enable_thinking`); a template-less
                     tokenizer is refused by name
              raw    the first turn's text as it is (base models, the zoo, completion-mode HumanEval)
              auto   chat when the tokenizer has a template, else raw

BOS is written once: a template writes it as text (encoding adds nothing more); where the tokenizer
adds a BOS of its own and the text does not start with it, it is added, once. Every result records
`Rendering.describe(tokenizer)` and each prompt's rendered text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from framework.data.chat import Message, render_text, with_bos, with_system
from framework.workloads.suite import BenchPrompt

TEMPLATES = ("auto", "chat", "raw")


@dataclass(frozen=True)
class Rendered:
    ids: list[int]
    text: str
    template: str  # chat | raw: what was used


@dataclass(frozen=True)
class Rendering:
    template: str = "auto"
    system_prompt: str | None = None  # chat only; a suite's own system prompt wins
    thinking: bool | None = None  # chat only: enable_thinking for templates that read it; None: the template's default

    def __post_init__(self) -> None:
        if self.template not in TEMPLATES:
            raise ValueError(f"workload.render.template must be one of {TEMPLATES}, got {self.template!r}")

    def mode(self, tokenizer) -> str:
        has = getattr(tokenizer, "chat_template", None) is not None
        if self.template == "chat" and not has:
            name = getattr(tokenizer, "name_or_path", "") or "the target's tokenizer"
            raise ValueError(f"workload.render.template=chat but {name} has no chat template (use raw for base models)")
        if self.template == "raw" and (self.system_prompt or self.thinking is not None):
            raise ValueError("workload.render: system_prompt and thinking need template=chat (raw text has no roles)")
        return "chat" if self.template == "chat" or (self.template == "auto" and has) else "raw"

    def render(self, tokenizer, prompt: BenchPrompt, answers: tuple[str, ...] = ()) -> Rendered:
        """Turn len(answers) + 1 of the prompt: every earlier turn followed by its answer (the target's own)."""
        if tokenizer is None:
            raise ValueError("the workload's prompts are text: the target needs a tokenizer beside its checkpoint")
        turn = len(answers)
        if turn >= len(prompt.turns):
            raise ValueError(f"prompt {prompt.id!r} has {len(prompt.turns)} turns, asked for turn {turn + 1}")
        if self.mode(tokenizer) == "raw":
            if turn:
                raise ValueError(f"prompt {prompt.id!r}: a later turn needs a chat template "
                                 "(workload.render.template=chat)")
            return Rendered(prompt_ids(tokenizer, prompt.turns[0]), prompt.turns[0], "raw")
        messages = [m for user, answer in zip(prompt.turns, answers)
                    for m in (Message("user", user), Message("assistant", answer))]
        messages = with_system([*messages, Message("user", prompt.turns[turn])], prompt.system or self.system_prompt)
        text = render_text(tokenizer, messages, generation_prompt=True, **self.template_options(tokenizer))
        return Rendered(prompt_ids(tokenizer, text), text, "chat")

    def template_options(self, tokenizer) -> dict:
        if self.thinking is None:
            return {}
        if "enable_thinking" not in tokenizer.chat_template:
            raise ValueError(f"workload.render.thinking={self.thinking}: "
                             "this chat template has no enable_thinking switch")
        return {"enable_thinking": self.thinking}

    def describe(self, tokenizer) -> dict:
        mode = self.mode(tokenizer) if tokenizer is not None else "token ids"
        template = getattr(tokenizer, "chat_template", None) if mode == "chat" else None
        return {"template": mode, "system_prompt": self.system_prompt, "thinking": self.thinking,
                "chat_template_sha256": hashlib.sha256(template.encode()).hexdigest()[:16] if template else None,
                "bos": getattr(tokenizer, "bos_token", None)}


def prompt_ids(tokenizer, text: str) -> list[int]:
    ids = with_bos(tokenizer, text)
    if not ids:
        raise ValueError("the rendered prompt is empty")
    return ids
