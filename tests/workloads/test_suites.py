"""The published suites read their own schemas from local fixtures (nothing downloads): ids, categories and
turns as the schema gives them, a file in another schema refused by the column it lacks, and every
conf/workload option instantiates and yields prompts."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pytest
from hydra.utils import instantiate
from omegaconf import OmegaConf

from framework.workloads.literature import GSM8K, MATH500, MBPP, HumanEval
from framework.workloads.mt_bench import MTBench
from framework.workloads.spec_bench import SpecBench
from framework.workloads.speed_bench import PLACEHOLDER, SpeedBench
from framework.workloads.suite import BenchPrompt, by_category

FIXTURES = Path(__file__).parent / "fixtures"
CONF = Path(__file__).resolve().parents[2] / "conf" / "workload"


def fixture(name: str) -> str:
    return str(FIXTURES / name)


def rows_of(name: str) -> list[dict]:
    return [json.loads(line) for line in (FIXTURES / name).read_text().splitlines()]


def write_jsonl(path: Path, rows: list[dict]) -> str:
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return str(path)


def test_spec_bench_keeps_both_turns_and_files_mt_bench_as_one_task():
    prompts = SpecBench(source=fixture("spec_bench.jsonl")).prompts()
    assert [p.id for p in prompts] == ["81", "111", "161", "241", "401", "481"]
    assert list(by_category(prompts)) == ["mt_bench", "translation", "summarization", "math_reasoning", "rag"]
    assert prompts[0].turns == ("Write a short postcard from a lighthouse keeper to a friend inland.",
                                "Now rewrite the postcard as a four-line poem.")
    assert prompts[2] == BenchPrompt("161", "translation",
                                     ("Translate French to English: Le marché ouvre tôt le samedi.",))


def test_spec_bench_keeps_mt_bench_categories_apart_when_asked():
    prompts = SpecBench(source=fixture("spec_bench.jsonl"), mt_bench_as_one=False).prompts()
    assert [p.category for p in prompts] == ["writing", "math", "translation", "summarization", "math_reasoning", "rag"]
    assert len(prompts[1].turns) == 2


def test_spec_bench_needs_a_source():
    with pytest.raises(ValueError, match="needs workload.suite.source"):
        SpecBench().prompts()


def test_speed_bench_qualitative_keeps_its_categories_and_turns():
    prompts = SpeedBench(source=fixture("speed_bench_qualitative.jsonl")).prompts()
    assert [p.category for p in prompts] == ["coding", "roleplay", "multilingual", "rag"]
    assert prompts[0].id == "0f3a9c1e5b7d4a2f8e6c1b3d5a7f9e20"
    assert prompts[1].turns == ("You are a ship's cook on a long voyage. Greet the new deckhand.",
                                "The deckhand asks what is for dinner tonight. Answer in character.")
    assert SpeedBench(source=fixture("speed_bench_qualitative.jsonl")).describe()["config"] == "qualitative"


def test_speed_bench_throughput_reads_prepared_messages_as_length_and_tier():
    suite = SpeedBench(source=fixture("speed_bench_throughput_2k.jsonl"), split="throughput", length="2k")
    prompts = suite.prompts()
    assert [p.category for p in prompts] == ["2k/low", "2k/mixed", "2k/high"]
    assert prompts[1].system == "You are a careful assistant."
    assert prompts[1].turns == ("Continue this long dialogue between two sailors: ...",)
    assert prompts[2].turns == ("Write a story set in a city of glass.",
                                "Now tell it again from the mayor's point of view.")
    assert suite.describe()["config"] == "throughput_2k"


def test_speed_bench_refuses_other_splits_a_mislabelled_bucket_and_placeholders(tmp_path):
    with pytest.raises(ValueError, match="qualitative.*throughput.*'validation'"):
        SpeedBench(split="validation")
    with pytest.raises(ValueError, match="throughput_2k.*throughput_8k"):
        SpeedBench(source=fixture("speed_bench_throughput_2k.jsonl"), split="throughput", length="8k").prompts()
    rows = rows_of("speed_bench_qualitative.jsonl")
    rows[2]["turns"] = [f"{PLACEHOLDER}\n\nTranslate: {{question}}"]
    with pytest.raises(ValueError, match=r"placeholder.jsonl row 2: field 'turns' holds SPEED-Bench's licence"):
        SpeedBench(source=write_jsonl(tmp_path / "placeholder.jsonl", rows)).prompts()


def test_mt_bench_reads_both_schemas():
    fastchat = MTBench(source=fixture("mt_bench_fastchat.jsonl")).prompts()
    assert [(p.id, p.category) for p in fastchat] == [("81", "writing"), ("101", "reasoning"), ("121", "coding")]
    assert fastchat[1].turns == ("Ann is taller than Ben and Ben is taller than Cal. Who is shortest?",
                                 "If Dan is shorter than Cal, who is shortest now?")
    h4 = MTBench(source=fixture("mt_bench_h4.jsonl")).prompts()
    assert [(p.id, p.category) for p in h4] == [("58210034", "writing"), ("1937445", "math"), ("77100562", "roleplay")]
    assert h4[1].turns == ("What is 15% of 240?", "And what is 15% of that result?")


def test_mt_bench_refuses_a_file_of_neither_schema_naming_both(tmp_path):
    source = write_jsonl(tmp_path / "other.jsonl", [{"id": 1, "category": "writing", "messages": ["hi"]}])
    with pytest.raises(ValueError, match="FastChat question.jsonl: question_id, category, turns; "
                                         "HuggingFaceH4/mt_bench_prompts: prompt_id, category, prompt"):
        MTBench(source=source).prompts()


def test_gsm8k_ids_are_row_numbers():
    prompts = GSM8K(source=fixture("gsm8k.jsonl")).prompts()
    assert [(p.id, p.category) for p in prompts] == [("0", "gsm8k"), ("1", "gsm8k"), ("2", "gsm8k")]
    assert prompts[2].turns == ("Lena reads 9 pages a day for a week. How many pages does she read?",)


@pytest.fixture
def math500_parquet(tmp_path) -> str:
    """MATH-500's fixture as parquet (what the hub serves), written here rather than committed as a binary."""
    path = tmp_path / "math500.parquet"
    datasets.Dataset.from_list(rows_of("math500.jsonl")).to_parquet(str(path))
    return str(path)


def test_math500_from_parquet_as_one_category_or_by_subject(math500_parquet):
    prompts = MATH500(source=math500_parquet).prompts()
    assert [p.id for p in prompts] == ["test/algebra/1001.json", "test/geometry/2002.json",
                                       "test/number_theory/3003.json", "test/algebra/1004.json"]
    assert {p.category for p in prompts} == {"math500"}
    assert prompts[0].turns == ("Solve for $x$: $3x + 7 = 22$.",)
    by_subject = by_category(MATH500(source=math500_parquet, by_subject=True).prompts())
    assert {c: [p.id for p in ps] for c, ps in by_subject.items()} == {
        "Algebra": ["test/algebra/1001.json", "test/algebra/1004.json"], "Geometry": ["test/geometry/2002.json"],
        "Number Theory": ["test/number_theory/3003.json"]}


def test_humaneval_turn_is_the_code_prompt_verbatim():
    prompts = HumanEval(source=fixture("humaneval.jsonl")).prompts()
    assert [(p.id, p.category) for p in prompts] == [("HumanEval/0", "humaneval"), ("HumanEval/1", "humaneval"),
                                                    ("HumanEval/2", "humaneval")]
    assert prompts[2].turns == ("def is_even(n: int) -> bool:\n    \"\"\"True when n is even.\n    >>> is_even(4)\n"
                                "    True\n    \"\"\"\n",)


def test_mbpp_states_the_task_and_its_tests_in_both_configurations():
    full = MBPP(source=fixture("mbpp_full.jsonl")).prompts()
    assert [(p.id, p.category) for p in full] == [("11", "mbpp"), ("12", "mbpp"), ("13", "mbpp")]
    assert full[1].turns == ("Write a function to reverse the words of a sentence.\n"
                             "The function is checked by these tests:\n"
                             "assert reverse_words('a b c') == 'c b a'\nassert reverse_words('hi') == 'hi'",)
    sanitized = MBPP(source=fixture("mbpp_sanitized.jsonl"), config="sanitized").prompts()
    assert [p.id for p in sanitized] == ["21", "22", "23"]
    assert sanitized[0].turns == ("Write a function to compute the square root of the sum of two squares.\n"
                                  "The function is checked by these tests:\nimport math\n"
                                  "assert math.isclose(hyp(3, 4), 5.0)",)


def test_a_file_missing_a_schema_column_is_refused_by_the_column(tmp_path):
    source = write_jsonl(tmp_path / "no_turns.jsonl", [{"question_id": 1, "category": "qa", "prompt": "Why?"}])
    with pytest.raises(ValueError, match=r"no \['turns'\] column"):
        SpecBench(source=source).prompts()
    with pytest.raises(ValueError, match=r"no \['unique_id'\] column"):
        MATH500(source=write_jsonl(tmp_path / "no_id.jsonl", [{"problem": "1+1?"}])).prompts()


def test_an_unreadable_row_is_refused_by_file_row_and_field(tmp_path):
    rows = rows_of("spec_bench.jsonl")
    rows[3]["turns"] = ["Summarize this.", ""]
    source = write_jsonl(tmp_path / "bad.jsonl", rows)
    with pytest.raises(ValueError, match=rf"{source} row 3: field 'turns' must be a non-empty list of non-empty texts"):
        SpecBench(source=source).prompts()
    rows = rows_of("gsm8k.jsonl")
    rows[1]["question"] = "   "
    source = write_jsonl(tmp_path / "blank.jsonl", rows)
    with pytest.raises(ValueError, match=rf"{source} row 1: field 'question' must be non-empty text"):
        GSM8K(source=source).prompts()


# conf/workload option -> (its fixture, settings the fixture needs); the options built on this machine (the zoo's
# prompt sets, the edits series) read no file.
BUILT_HERE = {"zoo", "edits"}
CONFIGURED = {
    "spec_bench": ("spec_bench.jsonl", {}),
    "speed_bench": ("speed_bench_throughput_2k.jsonl", {"split": "throughput", "length": "2k"}),
    "gsm8k": ("gsm8k.jsonl", {}),
    "math500": ("math500.jsonl", {}),
    "humaneval": ("humaneval.jsonl", {}),
    "mbpp": ("mbpp_full.jsonl", {}),
    "mt_bench": ("mt_bench_fastchat.jsonl", {}),
}


def test_every_published_suite_has_a_config():
    assert {f.stem for f in CONF.glob("*.yaml")} - BUILT_HERE == set(CONFIGURED)


@pytest.mark.parametrize("option", sorted(CONFIGURED))
def test_config_instantiates_and_yields_prompts(option):
    cfg = OmegaConf.load(CONF / f"{option}.yaml")
    name, settings = CONFIGURED[option]
    suite = instantiate(cfg.suite, source=fixture(name), **settings)
    prompts = suite.prompts()
    assert prompts and all(isinstance(p, BenchPrompt) for p in prompts)
    assert suite.name == option and suite.describe()["source"] == fixture(name)
    assert instantiate(cfg.render).template == ("raw" if option == "humaneval" else "auto")
    assert cfg.max_prompt_tokens is None


def test_the_edit_series_renames_one_identifier_per_request_base_by_base():
    """workload=edits: variants of one window in a row, each the window with one identifier renamed (so the rest
    of it, and the target's continuation, repeats across the series)."""
    import difflib

    from framework.workloads.edits import EditSeries

    prompts = EditSeries(bases=2, variants=3).prompts()
    assert len(prompts) == 6 and {p.category for p in prompts} == {"edit_series"}
    bases = [p.id.rsplit("/", 1)[0] for p in prompts]
    assert bases[:3] == [bases[0]] * 3 and bases[3:] == [bases[3]] * 3 and bases[0] != bases[3]
    first, second = prompts[0].turns[0], prompts[1].turns[0]
    assert first != second and difflib.SequenceMatcher(None, first, second).ratio() > 0.9
    assert EditSeries(bases=2, variants=3).prompts() == prompts  # deterministic
    with pytest.raises(ValueError, match="variants >= 2"):
        EditSeries(variants=1)
