"""The shipped real-size cohort: every row records its count, the method and the time it took,
sits in its count bin, and has prompts that fit the protocol's 2,048-token cap (the
tokenizer-free bound the build applies, and the offline default's own count), so
`bt base --cohort uoo-large` runs under the default --max-prompt-tokens."""

from __future__ import annotations

import json
from pathlib import Path

from breakthrough.protocol import DEFAULT
from breakthrough.tasks.optimum.generator import large_bin_of
from breakthrough.tasks.optimum.large import (
    MAX_PROMPT_PIECES,
    NAME,
    SIZES,
    prompt_pieces,
)
from breakthrough.tasks.optimum.prompts import VARIANTS

LARGE = Path(__file__).resolve().parents[2] / "cohorts" / f"{NAME}.jsonl"
ROWS = [json.loads(line) for line in LARGE.read_text().splitlines()]


def test_rows_record_count_method_and_time_in_their_bin() -> None:
    assert len(ROWS) >= 55
    for r in ROWS:
        assert r["size"] in SIZES[r["kind"]] and r["n"] == r["size"] == r["instance"]["n"]
        assert large_bin_of(r["n_optima"]) == r["bin"], r["id"]
        assert r["count_method"].split("+")[0] in ("ganak", "permanent", "dp"), r["id"]
        assert 0 <= r["count_seconds"] < 60 and r["build_seconds"] >= r["count_seconds"] - 0.01
    assert len({r["id"] for r in ROWS}) == len(ROWS)


def test_every_prompt_fits_the_bound_the_build_applies() -> None:
    assert all(prompt_pieces(r["kind"], r["instance"]) <= MAX_PROMPT_PIECES for r in ROWS)


def test_every_prompt_fits_the_cap_in_the_offline_default_tokens(smollm2_tokenizer) -> None:
    from breakthrough.models.families import FAMILIES, build_prompt_ids
    from breakthrough.tasks.family import user_message

    longest = max(
        len(build_prompt_ids(smollm2_tokenizer, FAMILIES["plain"], user_message(r, v),
                             max_prompt_tokens=10**6))
        for r in ROWS
        for v in VARIANTS
    )  # fmt: skip
    assert longest <= DEFAULT.max_prompt_tokens
