"""docs/extending.md's model-free recipe, followed in a temporary copy of the project: its files written from the
page's own code blocks, its edits made as the page lists them, and the contract tests run on the copy must pick
the new method up and pass (slow: a copy and a few hundred tests in a subprocess)."""

import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
NAME = "repeat_last"


def recipe_files(page: Path) -> dict[str, str]:
    """path -> text of every code block of the page whose first line is `# file: <path>`."""
    files = {}
    for block in re.findall(r"```(?:python|yaml)\n(.*?)```", page.read_text(), re.S):
        text = textwrap.dedent(block)
        first, _, rest = text.partition("\n")
        if first.startswith("# file: "):
            files[first.removeprefix("# file: ").strip()] = rest
    return files


def edit(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"the recipe's edit no longer applies to {path}: {old!r}"
    path.write_text(text.replace(old, new, 1))


def follow_the_recipe(copy: Path) -> None:
    """docs/extending.md, 'A model-free proposer', steps 1-8."""
    files = recipe_files(ROOT / "docs" / "extending.md")
    assert {"proposers/ngram/repeat_last.py", f"conf/proposer/{NAME}.yaml"} <= set(files)
    for path, text in files.items():
        (copy / path).write_text(text)
    edit(copy / "proposers/__init__.py", "from proposers.ngram.prompt_lookup import PromptLookupProposer\n",
         "from proposers.ngram.prompt_lookup import PromptLookupProposer\n"
         "from proposers.ngram.repeat_last import RepeatLastProposer\n")
    edit(copy / "proposers/__init__.py", "__all__ = [\n", '__all__ = [\n    "RepeatLastProposer",\n')
    edit(copy / "tests/proposers/test_proposer_contract.py", "BAD_SETTINGS = {",
         f'BAD_SETTINGS = {{"{NAME}": ("proposer.depth=0", "depth must be >= 1"),')
    edit(copy / "tests/framework/test_recurrent_targets.py", "CHAINS = {", f'CHAINS = {{"{NAME}", ')
    edit(copy / "conf/experiment/bench_hf.yaml", "methods: [", f"methods: [{NAME}, ")
    for projection in (copy / "conf/projection").glob("*.yaml"):
        edit(projection, "drafters:\n", f"drafters:\n  {NAME}: null\n")
    edit(copy / "README.md", "| `prompt_lookup` |", f"| `prompt_lookup`, `{NAME}` |")


@pytest.mark.slow
def test_the_model_free_recipe_adds_a_method_the_contract_tests_pick_up(tmp_path):
    copy = tmp_path / "speculum"
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for name in tracked.splitlines():
        if (ROOT / name).is_file():
            (copy / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, copy / name)
    follow_the_recipe(copy)
    env = {**os.environ, "PYTHONPATH": str(copy)}  # the copy's packages before the installed ones
    tests = ["tests/proposers/test_proposer_contract.py", "tests/test_configs.py", "tests/test_bench_hf.py",
             "tests/framework/test_recurrent_targets.py", "tests/test_docs_index.py"]
    # every tier (a method new to the project runs its whole contract, the cases the default run leaves to -m slow too)
    out = subprocess.run([sys.executable, "-m", "pytest", "-v", "-n0", "-p", "no:cacheprovider",
                          "-m", "not gpu and not vllm", *tests,
                          "-k", f"{NAME} or every_method_has_a_bad_setting or covers_every_proposer or chains_decode "
                          "or tables_list_every"], cwd=copy, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-4000:] + out.stderr[-2000:]
    for picked in (f"test_the_loop_law_is_the_targets[{NAME}-t1]",  # the exact law, found by the config alone
                   f"test_the_loop_law_is_the_targets_under_a_sizing_policy[{NAME}-goodput]",
                   f"test_greedy_is_plain_greedy[{NAME}]", f"test_rows_of_a_batch_decode_as_each_alone[{NAME}]",
                   f"test_every_method_builds_with_every_model_family[{NAME}-zoo]",
                   f"test_run_end_to_end[{NAME}-tiny]"):
        assert f"{picked} PASSED" in out.stdout, f"{picked} did not run and pass:\n{out.stdout[-3000:]}"
