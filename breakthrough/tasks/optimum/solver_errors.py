"""The two ways an exact count can fail, shared by the solver modules (no solver imports here,
so callers can catch them without the `uoo` extra installed)."""


class SolverTimeout(Exception):
    """A solver ran out of its time limit before proving its answer: no count, never a guess."""


class CountDisagreement(RuntimeError):
    """Two counting methods disagree: a modelling or solver bug, never a result."""
