"""Chat templates as published: ones that re-render earlier turns (Qwen3's thinking template drops past reasoning),
ones with {% generation %} blocks, ones that refuse a system message, and a tokenizer that writes BOS itself. The
labels are checked by decoding the masked tokens and comparing them with each assistant turn as the template
renders it at that turn."""

from __future__ import annotations

import pytest
from tokenizers import processors

from framework.data.chat import Message, render_chat
from framework.workloads.render import Rendering
from framework.workloads.suite import BenchPrompt

# Qwen3's rule, written out: an assistant turn after the last user message keeps its reasoning as <think>...</think>,
# earlier ones keep only their answer; enable_thinking=false writes an empty think block into the generation prompt.
QWEN3_STYLE = (
    "{% set ns = namespace(last_user=-1) %}"
    "{% for m in messages %}{% if m['role'] == 'user' %}{% set ns.last_user = loop.index0 %}{% endif %}{% endfor %}"
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}"
    "{% set answer = m['content'].split('</think>')[-1].lstrip('\\n') %}"
    "{% if '</think>' in m['content'] %}"
    "{% set reasoning = m['content'].split('</think>')[0].split('<think>')[-1].strip('\\n') %}"
    "{% else %}{% set reasoning = '' %}{% endif %}"
    "{% if loop.index0 > ns.last_user %}"
    "<|im_start|>assistant\n<think>\n{{ reasoning }}\n</think>\n\n{{ answer }}<|im_end|>\n"
    "{% else %}<|im_start|>assistant\n{{ answer }}<|im_end|>\n{% endif %}"
    "{% else %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n"
    "{% if enable_thinking is defined and enable_thinking is false %}<think>\n\n</think>\n\n{% endif %}{% endif %}"
)
GENERATION_BLOCKS = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
    "{% if m['role'] == 'assistant' %}{% generation %}{{ m['content'] }}<|im_end|>{% endgeneration %}\n"
    "{% else %}{{ m['content'] }}<|im_end|>\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
NO_SYSTEM = (  # as Gemma's and older Mistral templates do
    "{% if messages[0]['role'] == 'system' %}{{ raise_exception('System role not supported') }}{% endif %}"
    "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)
THINKING = [Message("system", "Be brief."), Message("user", "What is 2 plus 3?"),
            Message("assistant", "<think>\nadd them\n</think>\n\nIt is 5."), Message("user", "And twice that?"),
            Message("assistant", "<think>\ndouble 5\n</think>\n\nTen.")]


def with_template(tokenizer, template: str):
    copy = tokenizer.__class__.from_pretrained(tokenizer.name_or_path)
    copy.chat_template = template
    return copy


def labelled_spans(tokenizer, ids: list[int], mask: list[bool]) -> list[str]:
    """The decoded runs of labelled tokens, in order."""
    spans, run = [], []
    for token, labelled in zip(ids, mask, strict=True):
        if labelled:
            run.append(token)
        elif run:
            spans, run = spans + [tokenizer.decode(run)], []
    return spans + ([tokenizer.decode(run)] if run else [])


def test_a_thinking_template_trains_each_turn_as_the_template_renders_it_then(chat_tokenizer):
    """Qwen3-style: the whole conversation drops turn 1's reasoning, so turn 1 is its own sample (with its
    reasoning, as the model wrote it), and turn 2's sample has turn 1's answer alone in its context."""
    tokenizer = with_template(chat_tokenizer, QWEN3_STYLE)
    ids, mask = render_chat(tokenizer, THINKING)
    assert labelled_spans(tokenizer, ids, mask) == ["<think>\nadd them\n</think>\n\nIt is 5.<|im_end|>\n",
                                                    "<think>\ndouble 5\n</think>\n\nTen.<|im_end|>\n"]
    second = tokenizer.decode(ids).split("<|im_start|>system")[2]  # the second sample, from its system turn
    assert "It is 5." in second and "add them" not in second.split("Ten.")[0].split("And twice")[0]


def test_a_template_that_keeps_earlier_turns_stays_one_sample(chat_tokenizer):
    ids, mask = render_chat(chat_tokenizer, THINKING)  # ChatML: every rendering a prefix of the whole
    assert tokenizer_count(chat_tokenizer, ids, "<|im_start|>system") == 1
    assert labelled_spans(chat_tokenizer, ids, mask) == ["<think>\nadd them\n</think>\n\nIt is 5.<|im_end|>\n",
                                                         "<think>\ndouble 5\n</think>\n\nTen.<|im_end|>\n"]


def tokenizer_count(tokenizer, ids: list[int], text: str) -> int:
    return tokenizer.decode(ids).count(text)


def test_generation_blocks_mark_the_assistants_tokens(chat_tokenizer):
    tokenizer = with_template(chat_tokenizer, GENERATION_BLOCKS)
    ids, mask = render_chat(tokenizer, THINKING)
    assert labelled_spans(tokenizer, ids, mask) == ["<think>\nadd them\n</think>\n\nIt is 5.<|im_end|>",
                                                    "<think>\ndouble 5\n</think>\n\nTen.<|im_end|>"]
    assert ids[:1] == [tokenizer.bos_token_id] and ids.count(tokenizer.bos_token_id) == 1


def test_a_template_without_a_system_role_gets_the_system_prompt_in_the_first_user_turn(chat_tokenizer):
    tokenizer = with_template(chat_tokenizer, NO_SYSTEM)
    ids, mask = render_chat(tokenizer, THINKING)
    assert tokenizer.decode(ids).startswith("<|im_start|>user\nBe brief.\n\nWhat is 2 plus 3?<|im_end|>")
    assert len(labelled_spans(tokenizer, ids, mask)) == 2


def test_a_tokenizer_that_writes_bos_gets_it_once_and_the_labels_stay_put(chat_tokenizer):
    tokenizer = with_template(chat_tokenizer, NO_SYSTEM)
    bos = tokenizer.bos_token_id
    tokenizer.backend_tokenizer.post_processor = processors.TemplateProcessing(
        single=f"{tokenizer.bos_token} $A", special_tokens=[(tokenizer.bos_token, bos)])
    ids, mask = render_chat(tokenizer, THINKING[1:])
    assert ids[0] == bos and ids.count(bos) == 1 and not mask[0]
    assert labelled_spans(tokenizer, ids, mask)[1] == "<think>\ndouble 5\n</think>\n\nTen.<|im_end|>\n"


def test_workload_turns_render_as_the_thinking_template_does(chat_tokenizer):
    """A later turn's prompt carries the earlier answer as the template keeps it (reasoning dropped); thinking=false
    writes the empty think block the template has for it."""
    tokenizer = with_template(chat_tokenizer, QWEN3_STYLE)
    prompt = BenchPrompt("p", "chat", ("What is 2 plus 3?", "And twice that?"))
    second = Rendering("chat", thinking=False).render(tokenizer, prompt, ("<think>\nadd them\n</think>\n\nIt is 5.",))
    assert "It is 5." in second.text and "add them" not in second.text
    assert second.text.endswith("<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert Rendering("chat", thinking=True).render(tokenizer, prompt).text.endswith("<|im_start|>assistant\n")


def test_a_template_that_rewrites_the_turn_it_is_given_is_named(chat_tokenizer):
    rewrites = with_template(chat_tokenizer, QWEN3_STYLE.replace("{{ answer }}<|im_end|>",
                                                                 "{{ answer | upper }}<|im_end|>")
                             .replace("<|im_start|>assistant\n{% if enable", "<|im_start|>helper\n{% if enable"))
    with pytest.raises(ValueError, match="not a prefix"):
        render_chat(rewrites, THINKING)
