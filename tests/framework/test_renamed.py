"""framework.core.renamed: an old keyword is refused by name, naming the new one; every other call goes through."""

import inspect

import pytest

from framework.core.renamed import renamed


class Chain:
    @renamed(gamma="depth", num_tokens="depth")
    def __init__(self, depth: int = 4, kind: str = "iid"):
        """The levels drafted."""
        self.depth, self.kind = depth, kind


@renamed(n="count")
def repeat(token: int, count: int = 2) -> list[int]:
    return [token] * count


def test_new_names_and_positions_go_through():
    assert Chain().depth == 4 and Chain(3).depth == 3 and Chain(depth=2, kind="wor").kind == "wor"
    assert repeat(7) == [7, 7] and repeat(7, 3) == [7] * 3 and repeat(token=1, count=1) == [1]


@pytest.mark.parametrize("old", ["gamma", "num_tokens"])
def test_an_old_name_is_refused_naming_both(old):
    with pytest.raises(TypeError, match=rf"^Chain: `{old}` is now called `depth`$"):
        Chain(**{old: 2})
    with pytest.raises(TypeError, match=rf"`{old}` is now called `depth`"):  # not quietly the new one's value
        Chain(depth=2, **{old: 2})


def test_a_function_is_named_by_its_own_name():
    with pytest.raises(TypeError, match=r"^repeat: `n` is now called `count`$"):
        repeat(7, n=3)


def test_the_signature_and_docstring_are_the_functions():
    """Hydra, inspect and the docs read the real parameters, not (*args, **kwargs)."""
    assert list(inspect.signature(Chain).parameters) == ["depth", "kind"]
    assert list(inspect.signature(repeat).parameters) == ["token", "count"]
    assert Chain.__init__.__doc__ == "The levels drafted." and Chain.__init__.__name__ == "__init__"
