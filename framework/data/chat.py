"""Conversations as the target reads them: its own chat template, and a mask on the assistant's tokens.

The template decides every token the model sees (roles, separators, BOS), so the drafter must be
trained on exactly that text. The loss covers what the model writes, the assistant's turns (their
end-of-turn token included, which it must learn to predict), never what it is given.

The assistant's span of turn i is found by rendering: the tokens of the conversation up to turn i
with the generation prompt are a prefix of the whole, and turn i ends where the rendering of
messages[: i + 1] ends. No template marker ({% generation %}) is needed, which most published
templates lack; a template whose renderings are not prefixes of each other (one that rewrites earlier
turns, e.g. drops past reasoning) is refused by name instead of masked wrongly.

Two published schemas are read: ShareGPT (`conversations`: [{from, value}], roles human / gpt /
system) and messages (`messages`: [{role, content}]).
"""

from __future__ import annotations

from dataclasses import dataclass

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


def render_text(tokenizer, messages: list[Message], generation_prompt: bool = False, **template_options) -> str:
    """The conversation as the tokenizer's chat template writes it; template_options reach the template (e.g.
    enable_thinking)."""
    if getattr(tokenizer, "chat_template", None) is None:
        name = getattr(tokenizer, "name_or_path", "") or "the target's tokenizer"
        raise ValueError(f"{name} has no chat template: conversations cannot be rendered (train on plain text "
                         "with data=text, or give the tokenizer a chat_template)")
    return tokenizer.apply_chat_template([{"role": m.role, "content": m.content} for m in messages], tokenize=False,
                                         add_generation_prompt=generation_prompt, **template_options)


def encode(tokenizer, text: str) -> list[int]:
    # the template writes BOS (if the model wants one) as text: adding it again would double it
    return tokenizer(text, add_special_tokens=False)["input_ids"]


def render_chat(tokenizer, messages: list[Message]) -> tuple[list[int], list[bool]]:
    """(ids, mask) of one conversation under the tokenizer's chat template; mask True on the assistant's tokens."""
    if not any(m.role == "assistant" for m in messages):
        raise ValueError("a conversation without an assistant turn has nothing to train on")
    ids = encode(tokenizer, render_text(tokenizer, messages))
    mask = [False] * len(ids)
    for i, message in enumerate(messages):
        if message.role != "assistant":
            continue
        start = len(prefix_of(tokenizer, messages[:i], ids, generation_prompt=True, turn=i))
        end = len(prefix_of(tokenizer, messages[: i + 1], ids, generation_prompt=False, turn=i))
        mask[start:end] = [True] * (end - start)
    return ids, mask


def prefix_of(tokenizer, messages: list[Message], whole: list[int], generation_prompt: bool, turn: int) -> list[int]:
    part = encode(tokenizer, render_text(tokenizer, messages, generation_prompt)) if messages or generation_prompt else []
    if whole[: len(part)] != part:
        raise ValueError(f"the chat template's rendering up to turn {turn} is not a prefix of the whole conversation's "
                         "(it rewrites earlier turns, or the tokenizer merges across a turn boundary): the assistant's "
                         "tokens cannot be told apart")
    return part
