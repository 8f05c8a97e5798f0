"""The study's second half: per-trajectory signal summaries, hidden-state probes, the confirmatory
test."""
