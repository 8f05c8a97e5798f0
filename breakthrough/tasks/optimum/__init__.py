"""Uniqueness-of-Optimum (UoO) task family: seeded generator, exact enumerator, prompts, cohorts.

Spec: ../shared/reference/uniqueness.md (sections 3-7). Pure Python except `enumerate`, which
uses numpy and is needed only at generation time; the grader (`breakthrough.tasks.optimum.grader`)
needs no numpy."""

from breakthrough.tasks.optimum.generator import (  # noqa: F401
    BINS,
    KINDS,
    bin_of,
    evaluate,
    generate_instance,
)
