"""Prompts rendered as the model expects them (chat template, BOS once, raw completion), and a comparison on a
chat target whose second MT-Bench turn follows the target's own first answer."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hydra import compose, initialize_config_dir
from transformers import AutoTokenizer

from experiments import compare
from framework.lm.chat_models import pair_tokenizer, save_tiny_chat_target
from framework.workloads.render import Rendering
from framework.workloads.suite import BenchPrompt
from measurement.workload import Workload, answer_text, build_workload, quota

CONF = Path(__file__).resolve().parents[2] / "conf"
FIXTURES = Path(__file__).resolve().parent / "fixtures"
THINKING_TEMPLATE = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
                     "{% if add_generation_prompt %}<|im_start|>assistant\n{% if enable_thinking is defined and "
                     "not enable_thinking %}<think></think>{% else %}<think>{% endif %}{% endif %}")
PROMPT = BenchPrompt("7", "writing", ("Write a haiku.", "Now make it rhyme."))


@pytest.fixture(scope="module")
def chat_target(tmp_path_factory) -> Path:
    return save_tiny_chat_target(tmp_path_factory.mktemp("chat"), vocab_size=600, num_layers=2)


@pytest.fixture(scope="module")
def tokenizer(chat_target):
    return AutoTokenizer.from_pretrained(chat_target)


def test_the_chat_template_renders_turns_answers_and_a_system_prompt_with_bos_once(tokenizer):
    rendered = Rendering(system_prompt="Be brief.").render(tokenizer, PROMPT, ("An old pond.",))
    assert rendered.template == "chat"
    assert rendered.text == ("<|endoftext|><|im_start|>system\nBe brief.<|im_end|>\n"
                             "<|im_start|>user\nWrite a haiku.<|im_end|>\n"
                             "<|im_start|>assistant\nAn old pond.<|im_end|>\n"
                             "<|im_start|>user\nNow make it rhyme.<|im_end|>\n"
                             "<|im_start|>assistant\n")
    assert rendered.ids.count(tokenizer.bos_token_id) == 1 and rendered.ids[0] == tokenizer.bos_token_id
    assert Rendering(template="auto").render(tokenizer, PROMPT).template == "chat"


def test_raw_text_is_the_first_turn_as_it_is():
    tokenizer = pair_tokenizer(600)
    rendered = Rendering(template="auto").render(tokenizer, PROMPT)  # no template: raw
    assert rendered.template == "raw" and rendered.text == "Write a haiku."
    assert rendered.ids == tokenizer("Write a haiku.", add_special_tokens=False)["input_ids"]
    with pytest.raises(ValueError, match="a later turn needs a chat template"):
        Rendering(template="raw").render(tokenizer, PROMPT, ("An answer.",))
    with pytest.raises(ValueError, match="has no chat template"):
        Rendering(template="chat").render(tokenizer, PROMPT)
    with pytest.raises(ValueError, match="system_prompt and thinking need template=chat"):
        Rendering(template="raw", system_prompt="x").render(tokenizer, PROMPT)
    with pytest.raises(ValueError, match="template must be one of"):
        Rendering(template="jinja")


def test_thinking_is_switched_where_the_template_has_it(tokenizer):
    with pytest.raises(ValueError, match="no enable_thinking switch"):
        Rendering(thinking=False).render(tokenizer, PROMPT)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    tokenizer.chat_template = THINKING_TEMPLATE
    assert Rendering(thinking=False).render(tokenizer, PROMPT).text.endswith("<think></think>")
    assert Rendering(thinking=True).render(tokenizer, PROMPT).text.endswith("<think>")
    assert Rendering().describe(tokenizer)["chat_template_sha256"] is not None


def load(tmp_path, target: Path, *overrides: str):
    with initialize_config_dir(config_dir=str(CONF), version_base="1.3"):
        return compose(config_name="compare", overrides=[
            f"target.path={target}", "workload=mt_bench",
            f"workload.suite.source={FIXTURES / 'mt_bench_fastchat.jsonl'}",
            "experiment.methods=[prompt_lookup]", "experiment.samplings=[greedy]", "experiment.max_new_tokens=6",
            "experiment.check.samples=0", f"output_dir={tmp_path}", *overrides])


def test_the_second_turn_follows_the_targets_own_first_answer(tmp_path, chat_target, tokenizer):
    cfg = load(tmp_path, chat_target, "experiment.samples=1")
    result = compare.run(cfg)
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    turns = sorted(r.get("turn") for r in records if r["id"].startswith("run/"))
    assert turns == [1, 2]  # one two-turn prompt: both turns timed
    answer = next(r for r in records if r["id"].startswith("answer/"))
    first_run = next(r for r in records if r["id"].startswith("plain/") and r["turn"] == 1)
    assert answer["tokens"] == first_run["tokens"][0]  # the target's own answer: plain decoding of turn 1
    rendered = [json.loads(line) for line in (tmp_path / "prompts.jsonl").read_text().splitlines()]
    second = next(r for r in rendered if r["turn"] == 2)
    first_text = tokenizer.decode(answer["tokens"], skip_special_tokens=True).strip()
    prompt = build_workload(cfg, tokenizer, None).prompts[result["rows"][0]["category"]][0]
    assert second["template"] == "chat" and prompt.turns[0] in second["text"] and prompt.turns[1] in second["text"]
    assert f"<|im_start|>assistant\n{first_text}<|im_end|>" in second["text"]
    assert result["workload"]["render"]["template"] == "chat" and result["workload"]["suite"] == "mt_bench"
    assert "chat_template_sha256" in (tmp_path / "compare.md").read_text()


def test_a_length_cap_leaves_long_prompts_out_and_counts_them(tmp_path, chat_target, tokenizer):
    cfg = load(tmp_path, chat_target, "workload.max_prompt_tokens=85")  # the fixture's turn 1: 72 to 87 tokens here
    work = build_workload(cfg, tokenizer, None)
    assert work.description["left_out_too_long"] == {"reasoning": 1} and work.description["max_prompt_tokens"] == 85
    assert list(work.units) == ["writing", "coding"]  # a category with nothing that fits is left out
    with pytest.raises(ValueError, match=r"workload.max_prompt_tokens must be an integer >= 1, got 0"):
        build_workload(load(tmp_path, chat_target, "workload.max_prompt_tokens=0"), tokenizer, None)
    with pytest.raises(ValueError, match="no prompt fits 3 tokens"):
        build_workload(load(tmp_path, chat_target, "workload.max_prompt_tokens=3"), tokenizer, None)


def test_samples_are_shared_out_over_the_categories_in_turn():
    assert quota({"a": 3, "b": 1, "c": 5}, 6, 5) == {"a": 3, "b": 1, "c": 2}
    assert quota({"a": 3, "b": 1}, None, 2) == {"a": 2, "b": 1}
    assert quota({"a": 1, "b": 1}, 10, 5) == {"a": 1, "b": 1}


def test_the_thinking_span_is_measured_where_the_template_opens_one(tokenizer):
    thinking = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    thinking.add_tokens(["<think>", "</think>"], special_tokens=True)
    thinking.chat_template = THINKING_TEMPLATE
    end = thinking.convert_tokens_to_ids("</think>")
    assert Workload({}, {}, thinking, Rendering()).think_end() == end
    assert Workload({}, {}, thinking, Rendering(thinking=False)).think_end() is None  # an empty span in the prompt
    assert Workload({}, {}, tokenizer, Rendering()).think_end() is None  # ChatML without a thinking span


def test_an_answer_ends_at_its_turn_and_leaves_its_thinking_out(tokenizer):
    thinking = AutoTokenizer.from_pretrained(tokenizer.name_or_path)
    thinking.add_tokens(["<think>", "</think>"], special_tokens=True)
    ids = lambda text: thinking(text, add_special_tokens=False)["input_ids"]  # noqa: E731
    assert answer_text(thinking, ids("Some thought.</think> The answer.<|im_end|>trailing")) == "The answer."
    assert answer_text(thinking, ids("Plain answer<|endoftext|>more")) == "Plain answer"


def test_a_later_turn_follows_the_answer_of_the_sampling_it_is_timed_under(tmp_path, chat_target, tokenizer):
    """Turn 2 under a second sampling is built on that sampling's answer, not on the first one's cached rendering
    (and a resumed run, which asks in another order, builds the same prompts) (issue 58, case 1)."""
    work = build_workload(load(tmp_path, chat_target), tokenizer, None)
    category = next(c for c in work.prompts if work.turns(c, 0) > 1)
    greedy, sampled = (lambda c, i, t: "Greedy answer."), (lambda c, i, t: "A sampled answer.")
    first = tokenizer.decode(work.ids(category, 0, 2, greedy)[0])
    second = tokenizer.decode(work.ids(category, 0, 2, sampled)[0])
    assert "Greedy answer." in first and "A sampled answer." in second and "Greedy answer." not in second
    resumed = build_workload(load(tmp_path, chat_target), tokenizer, None)
    assert tokenizer.decode(resumed.ids(category, 0, 2, sampled)[0]) == second
