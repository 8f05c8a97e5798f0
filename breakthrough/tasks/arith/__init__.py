"""`arith`: a DEMONSTRATION task family, not part of the study.

One- and two-digit arithmetic with exact integer answers and a difficulty dial (levels 1-5),
small enough that the offline SmolLM2-135M solves some of it some of the time, so `make demo`
shows varied regimes on a laptop CPU instead of a table of `unsolved_hard` MATH cells.
Modules: `generator` (seeded problems per level), `prompts` (the user turn), `grader` (exact
integer check), `recipes` (the `arith` cohort: which generated problems the demo runs and the
measured success rates that chose them). Pure Python."""
