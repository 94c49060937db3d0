"""Bugs planted in production code of the loop (adapter, attention, sampling, drafting, decoder, committed paths)
are caught through the real loop, against transformers' own reference; the clean code passes every witness."""

import pytest

from harness.loop_mutants import CAUGHT_ABOVE, CLEAN_AT_MOST, loop_mutants


@pytest.mark.parametrize("mutant", loop_mutants(), ids=lambda m: m.name)
def test_loop_mutant_is_caught_by_its_witness(mutant):
    clean, buggy = mutant.tvs()
    assert clean <= CLEAN_AT_MOST, f"the clean code must pass {mutant.name}'s witness (TV {clean:.2e})"
    assert buggy > CAUGHT_ABOVE, f"{mutant.name} survived its witness (TV {buggy:.2e})"
