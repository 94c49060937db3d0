"""Heads reach a proposer loaded: the config builds them (a loader node), the proposer only drives them.

A proposer that also took a folder held two ways to say the same thing and read files in its constructor; a path
given where a head belongs is named instead, with the config key that loads one.
"""

from __future__ import annotations

from pathlib import Path


def refuse_path(value, owner: str, argument: str, key: str, loader: str = "proposers.load_head"):
    """`value` unless it is a path (str or Path): then a TypeError naming the config key and the loader to use."""
    if isinstance(value, (str, Path)):
        raise TypeError(f"{owner}: `{argument}` takes a loaded head, not a path ({value}); configs build it "
                        f"({key}=<folder>), code calls {loader}(<folder>)")
    return value
