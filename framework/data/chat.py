"""Conversations as the target reads them: its own chat template, and a mask on the assistant's tokens.

The template decides every token the model sees (roles, separators, BOS), so the drafter must be
trained on exactly that text. The loss covers what the model writes, the assistant's turns (their
end-of-turn token included, which it must learn to predict), never what it is given.

Which tokens are the assistant's, by the template's own account:
- a template with `{% generation %}` blocks marks them itself (transformers' return_assistant_tokens_mask);
- otherwise by rendering: turn i starts where the rendering of messages[:i] with the generation prompt ends and
  ends where that of messages[: i + 1] ends. Where every such rendering is a prefix of the whole conversation's
  (most templates), the conversation is one sample with every assistant turn labelled;
- a template that re-renders earlier turns (Qwen3's thinking template drops past reasoning; DeepSeek-R1's
  likewise) is not prefix-consistent: then each assistant turn is its own sample, rendered with the context the
  template gives it at that turn (SpecForge's per-turn rule), its own tokens the only labels.
A template that refuses a system message gets it folded into the first user turn; BOS appears once, written by
the template or, where the tokenizer adds one and the template does not, added (`with_bos`).

Two published schemas are read: ShareGPT (`conversations`: [{from, value}], roles human / gpt /
system) and messages (`messages`: [{role, content}]).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jinja2.exceptions import TemplateError

SHAREGPT_ROLES = {"human": "user", "user": "user", "gpt": "assistant", "chatgpt": "assistant", "bing": "assistant",
                  "bard": "assistant", "assistant": "assistant", "system": "system"}
ROLES = ("system", "user", "assistant")


@dataclass(frozen=True)
class Message:
    role: str  # system | user | assistant
    content: str

    def __post_init__(self) -> None:
        if self.role not in ROLES:
            raise ValueError(f"message role {self.role!r} is none of {ROLES}")
        if not isinstance(self.content, str):
            raise ValueError(f"message content must be text, got {type(self.content).__name__}")


def from_sharegpt(turns: list[dict]) -> list[Message]:
    """ShareGPT's [{from, value}] as messages; an unknown speaker is named."""
    out = []
    for turn in turns:
        speaker = str(turn.get("from", "")).lower()
        if speaker not in SHAREGPT_ROLES:
            raise ValueError(f"ShareGPT speaker {turn.get('from')!r} is none of {sorted(SHAREGPT_ROLES)}")
        out.append(Message(SHAREGPT_ROLES[speaker], turn.get("value") or ""))
    return out


def from_messages(turns: list[dict]) -> list[Message]:
    return [Message(str(turn.get("role", "")).lower(), turn.get("content") or "") for turn in turns]


def with_system(messages: list[Message], system_prompt: str | None) -> list[Message]:
    """The conversation with `system_prompt` first, unless it has its own system message."""
    if not system_prompt or (messages and messages[0].role == "system"):
        return messages
    return [Message("system", system_prompt), *messages]


def template_of(tokenizer) -> str:
    template = getattr(tokenizer, "chat_template", None)
    if template is None:
        name = getattr(tokenizer, "name_or_path", "") or "the target's tokenizer"
        raise ValueError(f"{name} has no chat template: conversations cannot be rendered (train on plain text "
                         "with data=text, or give the tokenizer a chat_template)")
    return template


def as_dicts(messages: list[Message]) -> list[dict]:
    return [{"role": m.role, "content": m.content} for m in messages]


def render_text(tokenizer, messages: list[Message], generation_prompt: bool = False, **template_options) -> str:
    """The conversation as the tokenizer's chat template writes it; template_options reach the template (e.g.
    enable_thinking)."""
    template_of(tokenizer)
    return tokenizer.apply_chat_template(as_dicts(fold_system_if_refused(tokenizer, messages, **template_options)),
                                         tokenize=False, add_generation_prompt=generation_prompt, **template_options)


def fold_system_if_refused(tokenizer, messages: list[Message], **template_options) -> list[Message]:
    """The messages, or, for a template that refuses a system role (Gemma's, Mistral's older ones), the system
    prompt folded into the first user turn, as those models' own guides write it."""
    if not messages or messages[0].role != "system":
        return messages
    try:
        tokenizer.apply_chat_template(as_dicts(messages[:2]), tokenize=False, **template_options)
        return messages
    except TemplateError as error:
        if len(messages) < 2 or messages[1].role != "user":
            raise ValueError(f"the chat template refuses this conversation ({error}) and its system prompt has no user "
                             "turn after it to be folded into") from None
        first = Message("user", f"{messages[0].content}\n\n{messages[1].content}")
        return [first, *messages[2:]]


def encode(tokenizer, text: str) -> list[int]:
    # the template writes BOS (if the model wants one) as text: adding it again would double it
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def with_bos(tokenizer, text: str) -> list[int]:
    """The text's ids with the tokenizer's BOS exactly once: kept when the text writes it, added when the
    tokenizer would add one and the text does not."""
    ids = encode(tokenizer, text)
    if adds_bos(tokenizer) and ids[:1] != [tokenizer.bos_token_id]:
        ids = [tokenizer.bos_token_id, *ids]
    return ids


def adds_bos(tokenizer) -> bool:
    bos = tokenizer.bos_token_id
    return bos is not None and tokenizer("", add_special_tokens=True)["input_ids"][:1] == [bos]


GENERATION_BLOCK = re.compile(r"\{%-?\s*generation\s*-?%\}")


class NotAPrefix(ValueError):
    pass


def render_chat(tokenizer, messages: list[Message], **template_options) -> tuple[list[int], list[bool]]:
    """(ids, mask) of one conversation under the tokenizer's chat template; mask True on the assistant's tokens (the
    per-turn samples, one after another, where the template re-renders earlier turns)."""
    if not any(m.role == "assistant" for m in messages):
        raise ValueError("a conversation without an assistant turn has nothing to train on")
    if GENERATION_BLOCK.search(template_of(tokenizer)):
        return marked_by_template(tokenizer, messages, **template_options)
    ids = with_bos(tokenizer, render_text(tokenizer, messages, **template_options))
    try:
        return ids, assistant_mask(tokenizer, messages, ids, range(len(messages)), **template_options)
    except NotAPrefix:  # the template rewrites earlier turns: each assistant turn as the template renders it then
        samples = [turn_sample(tokenizer, messages[: i + 1], **template_options)
                   for i, m in enumerate(messages) if m.role == "assistant"]
        return [t for ids, _ in samples for t in ids], [m for _, mask in samples for m in mask]


def turn_sample(tokenizer, messages: list[Message], **template_options) -> tuple[list[int], list[bool]]:
    """The conversation up to and including its last (assistant) turn, that turn's tokens labelled."""
    ids = with_bos(tokenizer, render_text(tokenizer, messages, **template_options))
    try:
        return ids, assistant_mask(tokenizer, messages, ids, [len(messages) - 1], **template_options)
    except NotAPrefix as error:
        raise ValueError(f"{error}, even rendered up to that turn alone: the tokenizer merges tokens across the turn "
                         "boundary (or the template rewrites the turn it is given)") from None


def assistant_mask(tokenizer, messages: list[Message], ids: list[int], turns, **template_options) -> list[bool]:
    """True on the tokens of the assistant turns among `turns`, each the span between the rendering of the turns
    before it with the generation prompt and that of the conversation through it."""
    mask = [False] * len(ids)
    for i in turns:
        if messages[i].role != "assistant":
            continue
        start = len(prefix_of(tokenizer, messages[:i], ids, True, i, **template_options))
        end = len(prefix_of(tokenizer, messages[: i + 1], ids, False, i, **template_options))
        mask[start:end] = [True] * (end - start)
    return mask


def prefix_of(tokenizer, messages: list[Message], whole: list[int], generation_prompt: bool, turn: int,
              **template_options) -> list[int]:
    if not messages and not generation_prompt:
        return []
    part = with_bos(tokenizer, render_text(tokenizer, messages, generation_prompt, **template_options))
    if whole[: len(part)] != part:
        raise NotAPrefix(f"the chat template's rendering up to turn {turn} is not a prefix of the conversation's")
    return part


def marked_by_template(tokenizer, messages: list[Message], **template_options) -> tuple[list[int], list[bool]]:
    """A template with {% generation %} blocks: its own mask (which needs a fast tokenizer)."""
    out = tokenizer.apply_chat_template(as_dicts(fold_system_if_refused(tokenizer, messages, **template_options)),
                                        tokenize=True, return_dict=True, return_assistant_tokens_mask=True,
                                        **template_options)
    ids, mask = list(out["input_ids"]), [bool(m) for m in out["assistant_masks"]]
    if adds_bos(tokenizer) and ids[:1] != [tokenizer.bos_token_id]:
        ids, mask = [tokenizer.bos_token_id, *ids], [False, *mask]
    if not any(mask):
        raise ValueError("the chat template has {% generation %} blocks but marked none of this conversation's tokens")
    return ids, mask
