"""Constraints on what may come next: grammars through a grammar engine (the Constraint role is in framework.core)."""
