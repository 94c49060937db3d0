"""keep_large_tensors_on_heap: tensors over glibc's mmap threshold stop costing page faults at every allocation."""

import subprocess
import sys

import pytest

FAULTS = """
import resource, torch
from framework.core.host_memory import keep_large_tensors_on_heap
def faults():
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(40):
        torch.ones(16 * 2**20).sum()  # 64 MiB, written whole
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before
mapped = faults()
print(keep_large_tensors_on_heap(), mapped, faults())
"""


def test_large_tensors_reuse_their_pages():
    """In a fresh process (the setting is the process's; the tests' own run has it on): 40 tensors before the
    setting, then 40 after."""
    done = subprocess.run([sys.executable, "-c", FAULTS], capture_output=True, text=True, check=True)
    on, mapped, heap = done.stdout.split()
    if on != "True":
        pytest.skip("this C library has no mallopt")
    assert int(mapped) > 40 * 16 * 2**20 / 4096 * 0.9  # a fault per page of every tensor without it
    assert int(heap) < int(mapped) / 4  # the first few tensors grow the heap; the rest reuse it
