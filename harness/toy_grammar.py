"""Toy grammars for the exact harness: one language given twice, as a regex the loop's grammar engine compiles
(framework/constraints/grammar.py) and as a deterministic automaton written by hand for the reference
(harness/reference.py), so that the reference shares no code with what it checks.
"""

from __future__ import annotations

from dataclasses import dataclass

from framework.constraints.grammar import Grammar, GrammarConstraint


@dataclass(frozen=True)
class ToyGrammar:
    regex: str  # over the token strings below (one character each)
    tokens: str  # token i's text is tokens[i]
    # the automaton: transitions[state][token] = next state, -1 = forbidden; state 0 starts
    transitions: tuple[tuple[int, ...], ...]
    ebnf: str | None = None  # the same language as an EBNF grammar: the loop compiles this one instead of the regex

    def constraint(self) -> GrammarConstraint:
        grammar = Grammar(ebnf=self.ebnf) if self.ebnf is not None else Grammar(regex=self.regex)
        return GrammarConstraint(grammar, list(self.tokens), len(self.tokens))

    def allowed_next(self, emitted: tuple[int, ...]) -> list[int]:
        state = 0
        for token in emitted:
            state = self.transitions[state][token]
            if state < 0:
                raise ValueError(f"the reference automaton forbids {emitted}")
        return [token for token, nxt in enumerate(self.transitions[state]) if nxt >= 0]


# vocabulary 3: "a" is always followed by "b" (and by nothing else)
A_THEN_B = ToyGrammar("(ab|b|c)*", "abc", ((1, 0, 0), (-1, 0, -1)))
# vocabulary 5: a letter of "ab" must be followed by one of "cd"; "e" stands alone; "c"/"d" never open a pair
PAIRS = ToyGrammar("([ab][cd]|e)*", "abcde", ((1, 1, -1, -1, 0), (-1, -1, 0, 0, -1)))
PAIRS_EBNF = ToyGrammar(PAIRS.regex, PAIRS.tokens, PAIRS.transitions, ebnf='root ::= ( [ab] [cd] | "e" )*')
