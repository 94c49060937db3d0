"""The tests themselves: none asserts nothing, none compares a value with itself.

Read as code (ast), not run: a test function counts as checking something when it holds an `assert`, a
`pytest.raises` / `pytest.warns` block, a call to an `assert*` function (torch.testing.assert_close, ...),
or a call to a helper of its own module that does one of these. A comparison whose two sides are the same
expression (`f(x) == f(x)`) is flagged wherever it stands: any deterministic code passes it.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def _called_names(node: ast.AST) -> set[str]:
    names = set()
    for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
        func = call.func
        names.add(func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", ""))
    return names


def _checks_directly(node: ast.AST) -> bool:
    if any(isinstance(n, ast.Assert) for n in ast.walk(node)):
        return True
    return any(name.startswith("assert") or name in ("raises", "warns", "fail") for name in _called_names(node))


def silent_tests(source: str) -> list[str]:
    """Names of the test functions in `source` that check nothing."""
    tree = ast.parse(source)
    # helpers: functions, and classes (a random source whose draws assert, say), by the name a test calls
    functions = {f.name: f for f in ast.walk(tree)
                 if isinstance(f, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))}
    checking = {name for name, f in functions.items() if _checks_directly(f)}
    grew = True
    while grew:  # helpers that call checking helpers check too
        grew = False
        for name, f in functions.items():
            if name not in checking and _called_names(f) & checking:
                checking.add(name)
                grew = True
    return sorted(name for name, f in functions.items()
                  if name.startswith("test_") and not isinstance(f, ast.ClassDef) and name not in checking)


def self_comparisons(source: str) -> list[int]:
    """Line numbers of comparisons whose two sides are the same expression."""
    lines = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            if any(ast.dump(a) == ast.dump(b) for a, b in zip(sides, sides[1:])):
                lines.append(node.lineno)
    return lines


# Functions whose outputs the docs quote (acceptance tables, decode rates, tokens per forward, the laws' distance):
# a test of one of them must pin a value, not only that it lies in a range or is finite.
QUOTED = {"accuracy", "draft_acceptance", "decode_rate", "score_settings", "paired_lengths", "chain_length", "summary",
          "forward_tree_cost", "statistical_check", "mean_accepted_length", "tokens_per_forward", "acceptance"}
RANGE_CALLS = {"isfinite", "isnan", "isinf"}


def _is_range_only(test: ast.expr) -> bool:
    """A check that only bounds a value by 0 or 1 (0 <= x <= 1, x > 0), asks that it be finite, or counts its entries
    (len(x) == 3): what almost any wrong value passes too. A learnt threshold (x > 0.9) is a check of its own."""
    if isinstance(test, ast.BoolOp):
        return all(_is_range_only(v) for v in test.values)
    if isinstance(test, ast.Call) and getattr(test.func, "id", "") in ("all", "any") and test.args \
            and isinstance(test.args[0], ast.GeneratorExp):
        return _is_range_only(test.args[0].elt)
    if isinstance(test, ast.Compare):
        sides = [test.left, *test.comparators]
        numbers = [isinstance(side, ast.Constant) and isinstance(side.value, (int, float)) for side in sides]
        constants = [n and side.value in (0, 1) for n, side in zip(numbers, sides)]  # the trivial bounds
        lengths = [isinstance(side, ast.Call) and getattr(side.func, "id", "") == "len" for side in sides]
        ordering = all(isinstance(op, (ast.Lt, ast.LtE, ast.Gt, ast.GtE)) for op in test.ops)
        counted = any(lengths) and all(c or n for c, n in zip(numbers, lengths))
        return counted or (ordering and any(constants) and not all(constants))
    return bool(_called_names(test) & RANGE_CALLS)


def range_only_tests(source: str) -> list[str]:
    """`test: name` for each value a test takes from a QUOTED function and checks only by range, finiteness or size."""
    found = []
    for f in ast.walk(ast.parse(source)):
        if not (isinstance(f, ast.FunctionDef) and f.name.startswith("test_")):
            continue
        quoted = {t.id for n in ast.walk(f) if isinstance(n, ast.Assign) and isinstance(n.value, ast.Call)
                  and _called_names(n.value) & QUOTED for t in n.targets if isinstance(t, ast.Name)}
        for name in sorted(quoted):
            checks = [a.test for a in ast.walk(f) if isinstance(a, ast.Assert)
                      and any(isinstance(n, ast.Name) and n.id == name for n in ast.walk(a.test))]
            if checks and all(_is_range_only(test) for test in checks):
                found.append(f"{f.name}: {name}")
    return found


def test_no_test_asserts_nothing_or_compares_a_value_with_itself():
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        source = path.read_text()
        problems = [f"{name} checks nothing" for name in silent_tests(source)]
        problems += [f"line {line} compares a value with itself" for line in self_comparisons(source)]
        problems += [f"{where} only bounds what a quoted function returned" for where in range_only_tests(source)]
        if problems:
            found[str(path.relative_to(TESTS))] = problems
    assert not found, found


def test_the_checker_finds_both_kinds():
    planted = (
        "def helper(x):\n    assert x\n\n"
        "def test_fine():\n    helper(1)\n\n"
        "def test_silent():\n    x = 1 + 1\n\n"
        "def test_itself():\n    assert score('a') == score('a')\n\n"
        "class Checked:\n    def draw(self):\n        assert True\n\n"
        "def test_through_a_class():\n    Checked().draw()\n"
    )
    assert silent_tests(planted) == ["test_silent"]
    assert self_comparisons(planted) == [11]
    ranged = (
        "def test_in_range():\n    t = accuracy(h)\n    assert 0 <= t['accept'][0][0] <= 1 and math.isfinite(t['x'])\n"
        "    assert len(t['accept']) == 3 and all(0 <= a <= 1 for a in t['accept'])\n\n"
        "def test_pinned():\n    t = accuracy(h)\n    assert 0 <= t['a'] <= 1\n    assert t['a'] == expected(h)\n\n"
        "def test_unquoted_range():\n    u = other(h)\n    assert 0 <= u <= 1\n"
    )
    assert range_only_tests(ranged) == ["test_in_range: t"]


def test_the_write_guard_sees_a_file_written_into_a_repository(tmp_path):
    """tests/conftest.py fails the run when a test leaves a file in the repository: a planted one shows
    (in a repository of its own, so that no other test process sees it)."""
    spec = importlib.util.spec_from_file_location("suite_conftest", TESTS / "conftest.py")  # not tests/zoo's
    guard = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(guard)
    repository_files = guard.repository_files
    if subprocess.run(["git", "init", "-q", str(tmp_path)], capture_output=True).returncode != 0:
        pytest.skip("no git here: the guard is off")
    (tmp_path / "kept.txt").write_text("committed")
    before = repository_files(tmp_path)
    (tmp_path / "stray_output_of_a_test.json").write_text("{}")
    assert [line for line in repository_files(tmp_path) - before] == ["?? stray_output_of_a_test.json"]
