"""The grammar constraint: masks along every tree path from the committed state (checked against a hand-written
automaton), unreachable rows, pruning of point trees, the state advanced by emitted tokens only."""

import json

import pytest
import torch

from framework.constraints.grammar import Grammar, GrammarConstraint, bits_to_mask
from framework.core.constraint import forbidden_nodes, prune_forbidden, root_mask
from framework.core.tree import CandidateTree
from framework.core.tree_shape import TreeShape
from framework.zoo.checkpoints import find_folder
from framework.zoo.tokenizer import load_tokenizer
from harness.toy_grammar import PAIRS


def reference_masks(tokens: torch.Tensor, shape: TreeShape, emitted: list[tuple[int, ...]]) -> torch.Tensor:
    """[B, N+1, V] by the automaton, each row's path walked from scratch; unreachable rows allow everything."""
    B, V = tokens.shape[0], len(PAIRS.tokens)
    out = torch.ones(B, shape.num_nodes + 1, V, dtype=torch.bool)
    for b in range(B):
        for row, path in enumerate(shape.root_paths):
            prefix = emitted[b]
            try:
                for i in path:
                    if int(tokens[b, i]) not in PAIRS.allowed_next(prefix):
                        raise ValueError
                    prefix = prefix + (int(tokens[b, i]),)
            except ValueError:
                continue
            out[b, row] = False
            out[b, row, PAIRS.allowed_next(prefix)] = True
    return out


def test_masks_along_every_path_match_the_automaton():
    g = torch.Generator().manual_seed(0)
    shape = TreeShape.full(2, 3)
    constraint = PAIRS.constraint()
    constraint.start(3)
    emitted = [(), (0,), (4, 1)]
    constraint.advance(torch.tensor([[-1, -1], [0, -1], [4, 1]]))
    for _ in range(20):
        tokens = torch.randint(0, 5, (3, shape.num_nodes), generator=g)
        assert torch.equal(constraint.allowed(tokens, shape), reference_masks(tokens, shape, emitted))
        rows = torch.tensor([0, 5, 9])
        assert torch.equal(constraint.allowed(tokens, shape, rows), reference_masks(tokens, shape, emitted)[:, rows])


def test_the_state_moves_only_by_what_is_emitted():
    constraint = PAIRS.constraint()
    constraint.start(1)
    tree = CandidateTree.chain(torch.tensor([[0, 2, 1, 3]]))
    before = root_mask(constraint, 1)
    constraint.allowed(tree.tokens, tree.shape)  # walking a tree leaves the state where it was
    assert torch.equal(root_mask(constraint, 1), before)
    constraint.advance(torch.tensor([[0, -1]]))
    assert root_mask(constraint, 1)[0].nonzero().flatten().tolist() == [2, 3]
    with pytest.raises(ValueError, match="row 0 emitted token 4, which the grammar forbids"):
        constraint.advance(torch.tensor([[4]]))


def test_select_copies_states_independently():
    constraint = PAIRS.constraint()
    constraint.start(1)
    constraint.select(torch.zeros(2, dtype=torch.long))  # copies of one prompt
    constraint.advance(torch.tensor([[0], [4]]))
    masks = root_mask(constraint, 2)
    assert masks[0].nonzero().flatten().tolist() == [2, 3] and masks[1].nonzero().flatten().tolist() == [0, 1, 4]


def test_forbidden_subtrees_are_pruned_from_point_trees_only():
    constraint = PAIRS.constraint()
    constraint.start(2)
    # nodes: 0 = "a" (ok), 1 = "c" under it (ok), 2 = "c" at the root (forbidden), 3 = "a" under node 2
    tokens = torch.tensor([[0, 2, 2, 0], [0, 3, 2, 1]])
    tree = CandidateTree(tokens, torch.tensor([-1, 0, -1, 2]))
    allowed = constraint.allowed(tree.tokens, tree.shape)
    assert forbidden_nodes(tree, allowed).tolist() == [[False, False, True, True]] * 2
    pruned, masks = prune_forbidden(tree, allowed)
    assert pruned.origin.tolist() == [0, 1] and pruned.tokens.tolist() == [[0, 2], [0, 3]]
    assert torch.equal(masks, allowed[:, :3])
    drawn = CandidateTree(tokens, tree.parents, torch.full((2, 5, 5), 0.2), "iid")
    assert prune_forbidden(drawn, allowed)[0] is drawn  # drawn children are counted by their rule: kept whole


def test_grammar_needs_exactly_one_kind_and_a_valid_text():
    with pytest.raises(ValueError, match="exactly one of json_schema, regex, ebnf"):
        Grammar(regex="a", ebnf="root ::= \"a\"")
    with pytest.raises(ValueError, match="exactly one"):
        Grammar()
    with pytest.raises(ValueError, match="does not compile"):
        GrammarConstraint(Grammar(ebnf="root ::= ("), list("ab"), 2)


def test_bits_unpack_in_token_order():
    bits = torch.tensor([[0b101, 1]], dtype=torch.int32)
    mask = bits_to_mask(bits, 40)
    assert mask[0].nonzero().flatten().tolist() == [0, 2, 32]


def test_json_schema_on_the_zoo_tokenizer_follows_the_schema():
    """A JSON schema compiled for the zoo's byte-level BPE: walking a valid document token by token, each token
    is allowed where it stands, and the stop token only at the end."""
    tokenizer = load_tokenizer(find_folder("target", "tokenizer.json"))
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}, "n": {"type": "integer"}},
              "required": ["ok", "n"], "additionalProperties": False}
    eos = tokenizer.eos_token_id
    constraint = GrammarConstraint(Grammar(json_schema=schema), tokenizer, len(tokenizer), [eos])
    constraint.start(1)
    ids = tokenizer.encode(json.dumps({"ok": True, "n": 12}))
    chain = CandidateTree.chain(torch.tensor([ids + [eos]]))
    allowed = constraint.allowed(chain.tokens, chain.shape)
    assert not bool(forbidden_nodes(chain, allowed).any())
    assert not bool(allowed[0, 1:len(ids), eos].any()) and bool(allowed[0, len(ids), eos])


def test_after_its_end_a_grammar_allows_its_stop_token_only():
    tokenizer = load_tokenizer(find_folder("target", "tokenizer.json"))
    eos = tokenizer.eos_token_id
    constraint = GrammarConstraint(Grammar(regex="ab"), tokenizer, len(tokenizer), [eos])
    constraint.start(1)
    ab = tokenizer.encode("ab")
    draft = CandidateTree.chain(torch.tensor([ab + [eos, eos, 5]]))  # a tree that runs past the end
    allowed = constraint.allowed(draft.tokens, draft.shape)[0, len(ab):]  # after "ab", the end, another stop, 5
    assert [row.nonzero().flatten().tolist() for row in allowed[:3]] == [[eos]] * 3 and bool(allowed[3].all())
    constraint.advance(torch.tensor([ab + [eos]]))
    assert constraint.finished() == [True]
    chain = CandidateTree.chain(torch.tensor([[eos, 5]]))
    allowed = constraint.allowed(chain.tokens, chain.shape)
    assert [row.nonzero().flatten().tolist() for row in allowed[0, :2]] == [[eos]] * 2 and bool(allowed[0, 2].all())
    constraint.advance(torch.tensor([[eos]]))  # a run that does not stop there emits the stop token again
    with pytest.raises(ValueError, match="after its grammar finished"):
        constraint.advance(torch.tensor([[5]]))


@pytest.mark.parametrize("schema, message", [
    ({"type": "array", "items": {"type": "integer"}, "uniqueItems": True}, r"at \$: \['uniqueItems'\] not enforced"),
    ({"type": "object", "properties": {"n": {"type": "integer", "multipleOf": 3}}}, r"at \$\.n: \['multipleOf'\]"),
    ({"not": {"type": "string"}}, r"\['not'\] not enforced"),
    ({"type": "number"}, "type 'number' is not one of"),
    ('{"type": "object", "properties": ', "json_schema is text but not JSON"),
    ("[1, 2]", "json_schema must be a JSON object"),
])
def test_a_schema_the_engine_would_not_enforce_is_refused_before_decoding(schema, message):
    """Keywords the grammar engine drops would have outputs that break them reported valid (issue 58, case 4)."""
    with pytest.raises(ValueError, match=message):
        Grammar(json_schema=schema)


def test_a_schema_given_as_text_is_read_once_as_the_object():
    text = '{"type": "object", "properties": {"n": {"type": "integer", "maximum": 9}}, "required": ["n"]}'
    assert Grammar(json_schema=text).json_schema == {"type": "object",
                                                     "properties": {"n": {"type": "integer", "maximum": 9}},
                                                     "required": ["n"]}
