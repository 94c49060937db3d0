"""Heads reach a proposer loaded: configs build them (a loader node in conf/models), the proposer only drives them."""

from pathlib import Path

import pytest

from proposers import DFlashProposer, EagleProposer, MedusaProposer, MtpProposer


@pytest.mark.parametrize("make, message", [
    (lambda: EagleProposer("/models/EAGLE3"),
     r"EagleProposer: `head` takes a loaded head, not a path \(/models/EAGLE3\); configs build it "
     r"\(models\.eagle3\.head\.path=<folder>\)"),
    (lambda: MedusaProposer(Path("/models/medusa")), r"MedusaProposer: `heads` takes a loaded head.*"
                                                     r"models\.medusa\.heads\.path=<folder>"),
    (lambda: DFlashProposer("dflash"), r"DFlashProposer: `drafter` takes a loaded head.*models\.dflash\.drafter\.path"),
    (lambda: MtpProposer("mtp"), r"MtpProposer: `modules` takes a loaded head.*models\.mtp\.modules\.path"),
])
def test_a_head_given_as_a_path_is_refused_with_the_config_key_that_loads_it(make, message):
    """Heads reach a proposer loaded (a config's loader node builds them): a folder where a head belongs is named."""
    with pytest.raises(TypeError, match=message):
        make()
