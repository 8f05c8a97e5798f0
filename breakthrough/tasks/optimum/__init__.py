"""Uniqueness-of-Optimum (UoO) task family: seeded generator, exact enumerator, prompts, cohort
recipes, grader.

Spec: ../shared/reference/uniqueness.md (sections 3-9). Pure Python except `enumerator`, which
uses numpy and is needed only at generation time; the grader (`breakthrough.tasks.optimum.grader`)
needs no numpy."""
