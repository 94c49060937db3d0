"""Run the exact matrix (clean or mutated) and format the results as Markdown tables."""

from __future__ import annotations

import time
from dataclasses import dataclass

from harness.exact import ExactCase, Pipeline, check_case
from harness.mutants import Mutant

TOLERANCE = 1e-9


@dataclass
class CaseResult:
    case: str
    tv: float
    support_violations: int
    passed: bool
    seconds: float


def run_case(case: ExactCase, pipeline: Pipeline = Pipeline()) -> CaseResult:
    start = time.perf_counter()
    cmp = check_case(case, pipeline)
    return CaseResult(case.name, cmp.tv, len(cmp.support_violations), cmp.passes(TOLERANCE),
                      time.perf_counter() - start)


@dataclass
class MutantResult:
    mutant: Mutant
    worst_tv: float
    worst_case: str
    caught: bool
    cases_run: int


def run_mutant(mutant: Mutant, cases: list[ExactCase], stop_when_caught: bool = True,
               clean_checked: bool = False) -> MutantResult:
    """Runs the matrix under the mutant; caught as soon as one case fails that the mutant's own clean pipeline
    passes (block's bugs against block verification: a case its clean rule fails proves nothing).
    clean_checked: the caller has seen the clean pipeline pass every case."""
    worst, worst_case, caught, ran = 0.0, "-", False, 0
    for case in cases:
        if not clean_checked and not run_case(case, mutant.clean).passed:
            continue
        try:
            result = run_case(case, mutant.pipeline)
            failed, tv = not result.passed, result.tv
        except (ValueError, RuntimeError):
            failed, tv = True, float("nan")  # the bug broke the pipeline outright: caught too
        ran += 1
        if failed and not caught or tv > worst:
            worst, worst_case = (tv if tv == tv else worst), case.name
        caught |= failed
        if caught and stop_when_caught:
            break
    return MutantResult(mutant, worst, worst_case, caught, ran)


def cases_table(results: list[CaseResult]) -> str:
    lines = ["| case | exact TV | impossible outputs | pass (TV <= 1e-9) |", "|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.case} | {r.tv:.1e} | {r.support_violations} | {'yes' if r.passed else 'NO'} |")
    return "\n".join(lines)


def mutants_table(results: list[MutantResult]) -> str:
    lines = ["| bug | lives in | worst TV over the cases run | first failing case | caught |", "|---|---|---|---|---|"]
    for r in results:
        lines.append(f"| {r.mutant.name}: {r.mutant.bug} | {r.mutant.where} | {r.worst_tv:.2e} | {r.worst_case} | "
                     f"{'yes' if r.caught else 'NO'} |")
    return "\n".join(lines)
