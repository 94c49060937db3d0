"""Keyword arguments that were renamed or moved elsewhere, refused by their old name.

A config or script written for an old name (`proposer.gamma=2`) must fail loudly, saying what the knob is called
now: accepted silently it would be ignored (a **settings catch-all passes it on) or, kept as an alias, leave two
names for one knob. Python's own error ("unexpected keyword argument") names only the old one.

    class DraftModelProposer:
        @renamed(gamma="depth")
        def __init__(self, draft_model, depth: int = 4, ...): ...

A knob that left the object altogether (`adaptive_depth`, now the policy `policy=adaptive`) is refused by `moved`,
naming where it went.
"""

from __future__ import annotations

import functools


def renamed(**old_to_new: str):
    """Decorate a function (an `__init__`, say) so that a call passing an old keyword raises a TypeError naming
    the old and the new name; every other call goes through unchanged."""
    return _refusing({old: f"is now called `{new}`" for old, new in old_to_new.items()})


def moved(**old_to_where: str):
    """As `renamed`, for keywords that left the function: the error says where the knob lives now."""
    return _refusing({old: f"is no longer a setting here: it is now {where}" for old, where in old_to_where.items()})


def _refusing(messages: dict[str, str]):
    def decorate(fn):
        where = fn.__qualname__.removesuffix(".__init__")  # DraftModelProposer, not DraftModelProposer.__init__

        @functools.wraps(fn)  # keeps the signature (inspect.signature follows __wrapped__) and the docstring
        def call(*args, **kwargs):
            for old, message in messages.items():
                if old in kwargs:
                    raise TypeError(f"{where}: `{old}` {message}")
            return fn(*args, **kwargs)

        return call

    return decorate
