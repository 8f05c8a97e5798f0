"""The study's second half: what `bt signals` (per-trajectory summaries), `bt probe` (the probe
dissection) and `bt confirm` (the confirmatory test and its forecast-point sweep) write.
"""

from __future__ import annotations

from breakthrough.schemas.columns import Column, Table
from breakthrough.schemas.common import CELL_ID, COUNT, LEVEL, MODEL, PROBLEM_ID

TOKENS = "tokens"
NATS = "nats"
SUMMARY_NULL = (
    "the series is absent (not recorded: an HTTP backend's hidden-state fields, a "
    "store made before instrumentation) or too short in the window"
)


def _summary(name: str, meaning: str, example: float, unit: str = "", section: str = "9.5"):
    return Column(
        name, "float64", meaning, example, unit=unit, null_when=SUMMARY_NULL, section=section
    )


# protocol 9.5's 15 frozen summaries (signals.summaries.FROZEN_SUMMARIES), in its order
FROZEN = (
    _summary(
        "normalized_entropy_mean",
        "Mean of the normalised entropy (entropy / ln|V|) of the full next-token distribution.",
        0.21,
        "fraction of ln|V|",
    ),
    _summary("surprisal_mean", "Mean surprisal −log p(sampled token).", 0.62, NATS),
    _summary(
        "top1_top2_probability_margin_mean",
        "Mean gap between the probabilities of the two most likely tokens.",
        0.71,
        "probability",
    ),
    _summary(
        "normalized_entropy_std",
        "Standard deviation (population) of the normalised entropy.",
        0.18,
        "fraction of ln|V|",
    ),
    _summary(
        "normalized_entropy_robust_slope",
        "Theil-Sen slope of the normalised entropy against the token index (≤ 512 points).",
        -0.0001,
        "per token",
    ),
    _summary(
        "surprisal_max_rise",
        "Largest one-step increase of the surprisal between consecutive tokens.",
        6.3,
        NATS,
    ),
    _summary(
        "successive_js_divergence_mean",
        "Mean Jensen-Shannon divergence between consecutive next-token distributions.",
        0.31,
        NATS,
    ),
    _summary(
        "successive_js_divergence_std",
        "Standard deviation of that Jensen-Shannon divergence.",
        0.19,
        NATS,
    ),
    _summary(
        "successive_kl_divergence_robust_slope",
        "Theil-Sen slope of KL(p_t ‖ p_{t−1}) against the token index.",
        0.0002,
        "nats per token",
    ),
    _summary(
        "relative_l2_step_mean",
        "Mean relative step of the final-normalised hidden state, ‖h_t − h_{t−1}‖ / ‖h_{t−1}‖.",
        0.84,
    ),
    _summary(
        "cosine_drift_mean",
        "Mean cosine drift of the hidden state, 1 − cos(h_t, h_{t−1}).",
        0.37,
    ),
    _summary(
        "hidden_norm_robust_slope",
        "Theil-Sen slope of the hidden state's norm ‖h_t‖ against the token index.",
        0.003,
        "per token",
    ),
    _summary(
        "spectral_successive_js_divergence_entropy",
        "Spectral entropy of the successive JS divergence series (median/MAD standardised, "
        "resampled to 256 points, Hann window, rFFT power without DC), normalised by log F.",
        0.88,
        "fraction of log F",
    ),
    _summary(
        "spectral_successive_js_divergence_centroid",
        "Spectral centroid of that power spectrum.",
        0.21,
        "cycles per point",
    ),
    _summary(
        "spectral_successive_js_divergence_low_energy_ratio",
        "Share of that spectrum's power at frequencies ≤ 0.10 cycles per point.",
        0.34,
        "fraction",
    ),
)

# protocol 9.8's 8 stream-summary features (signals.summaries.STREAM_SUMMARIES)
STREAM = (
    _summary(
        "stream_entropy_mean", "Mean entropy of the next-token distribution.", 0.9, NATS, "9.8"
    ),
    _summary("stream_entropy_std", "Standard deviation of that entropy.", 0.7, NATS, "9.8"),
    _summary(
        "stream_entropy_ols_slope",
        "Least-squares slope of that entropy against the token index.",
        -0.0004,
        "nats per token",
        "9.8",
    ),
    _summary("stream_surprisal_mean", "Mean surprisal of the sampled tokens.", 0.62, NATS, "9.8"),
    _summary(
        "stream_surprisal_max_rise",
        "Largest one-step increase of the surprisal.",
        6.3,
        NATS,
        "9.8",
    ),
    _summary(
        "stream_top1_mean", "Mean probability of the most likely token.", 0.8, "probability", "9.8"
    ),
    _summary(
        "stream_top1_std", "Standard deviation of that probability.", 0.2, "probability", "9.8"
    ),
    _summary(
        "stream_top1_ols_slope",
        "Least-squares slope of that probability against the token index.",
        0.0001,
        "per token",
        "9.8",
    ),
)

SIGNALS = Table(
    "signals",
    "RUN/signals.parquet",
    "bt signals",
    "one row per sample (trajectory) of the run, by sample_id: its ids and the summaries of "
    "its per-token series over the first `window` tokens",
    (
        Column("sample_id", "int64", "The sample's id in the store (`bt export`'s).", 1),
        CELL_ID,
        PROBLEM_ID,
        MODEL,
        LEVEL,
        Column(
            "kind",
            "str",
            "base, probe, restart or attempt (as in `bt export`'s samples).",
            "base",
        ),
        Column("anchor", "int64", "A probe's anchor t; -1 otherwise.", -1, unit=TOKENS),
        Column("budget", "int64", "B, C, or 0 for a base trace.", 0, unit=TOKENS),
        Column("branch", "int64", "The branch index.", 0),
        Column("seed", "int64", "The sample's seed.", 11),
        Column("n_tokens", "int64", "Generated tokens of the sample.", 9876, unit=TOKENS),
        Column(
            "observed_token_count",
            "int64",
            "Tokens the summaries read: min(series length, window); confirm excludes a cell "
            "whose base run has fewer than the forecast token.",
            512,
            unit=TOKENS,
            section="9.5",
        ),
        Column("finish_reason", "str", "How the sample ended (eos, length, …).", "eos"),
        Column(
            "correct",
            "bool",
            "The grader's verdict: the confirmatory test's primary endpoint for a base run.",
            True,
            null_when="not graded",
            section="9.5",
        ),
        Column(
            "window",
            "int64",
            "The window: the first tokens summarised (`--window`, default 512, the forecast "
            "point).",
            512,
            unit=TOKENS,
            section="9.5",
        ),
        *FROZEN,
        *STREAM,
    ),
    section="9.5",
)

_AUROC = "AUROC (0-1)"


def _ci(name: str, what: str, example: float) -> tuple[Column, Column, Column]:
    null = "the rows hold one class, or --bootstrap 0 (the bounds)"
    return (
        Column(
            name,
            "float64",
            what,
            example,
            unit=_AUROC,
            null_when="the rows hold one class",
            section="9.8",
        ),
        Column(
            f"{name}_lo",
            "float64",
            "Lower end of its 95% bootstrap interval.",
            example - 0.1,
            unit=_AUROC,
            null_when=null,
            section="9.8",
        ),
        Column(
            f"{name}_hi",
            "float64",
            "Upper end of its 95% bootstrap interval.",
            example + 0.08,
            unit=_AUROC,
            null_when=null,
            section="9.8",
        ),
    )


PROBE_TABLE = Table(
    "probe_table",
    "probe/probe_table.{parquet,csv}",
    "bt probe",
    "per arm one row per anchor t (the hidden-state probe, then the stream-summary probe), "
    "then one row for the leave-one-out pass-rate reference",
    (
        Column(
            "arm",
            "str",
            "hidden (anchor vectors of the final-normalised hidden state), stream (the 8 "
            "stream summaries) or loo (the reference).",
            "hidden",
            section="9.8",
        ),
        Column(
            "score",
            "str",
            "probe (out-of-fold probe scores) or loo (the leave-one-out pass rate).",
            "probe",
            section="9.8",
        ),
        Column(
            "t",
            "int64",
            "The anchor: generated tokens the probe reads.",
            4,
            unit=TOKENS,
            null_when="the loo row (no anchor)",
            section="9.8",
        ),
        *_ci("pooled", "Pooled AUROC on the pooled set (8 attempts per problem).", 0.85),
        *_ci(
            "within_failure_weighted",
            "Within-problem AUROC on the mid-band problems, weighted by failures.",
            0.5,
        ),
        *_ci(
            "within_pair_weighted",
            "Within-problem AUROC, weighted by discordant pairs (successes × failures).",
            0.51,
        ),
        Column("rows", "int64", "Trajectories scored at t.", 6480, unit=COUNT, section="9.8"),
        Column(
            "pooled_rows", "int64", "Of those, in the pooled set.", 1024, unit=COUNT, section="9.8"
        ),
        Column(
            "within_rows", "int64", "Of those, in the within set.", 5632, unit=COUNT, section="9.8"
        ),
        Column(
            "within_problems",
            "int64",
            "Mid-band problems of the within set.",
            22,
            unit=COUNT,
            section="9.8",
        ),
    ),
    section="9.8",
)

_FIT = "the endpoint was not fit (`status`, `reason`)"

CONFIRM = Table(
    "confirm",
    "confirm/confirm.csv (and confirm/t_T/confirm.csv for each point of a sweep)",
    "bt confirm",
    "one row per endpoint × variant (primary, secondary × main, level-free); confirm.json holds "
    "the same results with the plan, splits and exclusions",
    (
        Column(
            "endpoint",
            "str",
            "primary (eventual success of the base run) or secondary (1{R(4096) ≥ 0.75} on "
            "non-instant cells with R(4096) measured).",
            "primary",
            section="9.5",
        ),
        Column(
            "variant",
            "str",
            "main, or level-free (both models without `level`).",
            "main",
            section="9.5",
        ),
        Column("status", "str", "fit, or not fit.", "fit", section="9.5"),
        Column("test_rows", "int64", "Test cells scored.", 33, unit=COUNT, section="9.5"),
        Column("test_problems", "int64", "Problems among them.", 17, unit=COUNT, section="9.5"),
        Column("class_0", "int64", "Test rows of class 0.", 4, unit=COUNT, section="9.5"),
        Column("class_1", "int64", "Test rows of class 1.", 29, unit=COUNT, section="9.5"),
        Column(
            "baseline_auroc",
            "float64",
            "Test AUROC of the baseline model (difficulty + known-at-forecast columns).",
            0.8276,
            unit=_AUROC,
            null_when=_FIT,
            section="9.5",
        ),
        Column(
            "early_auroc",
            "float64",
            "Test AUROC of early_blocks (baseline + the 15 frozen summaries).",
            0.8534,
            unit=_AUROC,
            null_when=_FIT,
            section="9.5",
        ),
        Column(
            "delta_auroc",
            "float64",
            "ΔAUROC = early − baseline on the same test rows: the statistic.",
            0.0258,
            unit="AUROC difference",
            null_when=_FIT,
            section="9.5",
        ),
        Column(
            "ci_low",
            "float64",
            "Lower end of ΔAUROC's 95% percentile interval (problem-clustered bootstrap).",
            -0.0538,
            unit="AUROC difference",
            null_when=_FIT,
            section="9.5",
        ),
        Column(
            "ci_high",
            "float64",
            "Upper end of that interval.",
            0.1667,
            unit="AUROC difference",
            null_when=_FIT,
            section="9.5",
        ),
        Column(
            "success",
            "bool",
            "The registered verdict: ci_low > 0 (false when not fit).",
            False,
            section="9.5",
        ),
        Column(
            "skipped_draws",
            "int64",
            "Bootstrap draws skipped for holding one class.",
            67,
            unit=COUNT,
            null_when=_FIT,
            section="9.5",
        ),
        Column(
            "oof_baseline",
            "float64",
            "Train-side out-of-fold AUROC of the baseline (5-fold, grouped by problem).",
            0.6586,
            unit=_AUROC,
            null_when="not fit, or a fold held one class",
            section="9.5",
        ),
        Column(
            "oof_early_blocks",
            "float64",
            "The same for early_blocks.",
            0.6501,
            unit=_AUROC,
            null_when="not fit, or a fold held one class",
            section="9.5",
        ),
        Column(
            "trainval_rows", "int64", "Train + validation cells.", 130, unit=COUNT, section="9.5"
        ),
        Column("trainval_problems", "int64", "Problems among them.", 69, unit=COUNT, section="9.5"),
        Column(
            "reason",
            "str",
            "Why the endpoint was not fit (the power gate, a one-class test set, …).",
            None,
            null_when="fit",
            section="9.5",
        ),
    ),
    section="9.5",
)


def _sweep_columns(endpoint: str) -> tuple[Column, ...]:
    """The six columns of one endpoint at a forecast point (`confirm.sweep_row`)."""
    e = endpoint
    ex = {"primary": (0.026, -0.054, 0.167, 33), "secondary": (-0.09, -0.213, 0.033, 25)}[e]
    diff = "AUROC difference"
    return (
        Column(
            f"{e}_delta",
            "float64",
            f"ΔAUROC of the {e} endpoint at t.",
            ex[0],
            unit=diff,
            null_when=_FIT,
            section="9.5",
        ),
        Column(
            f"{e}_ci_low",
            "float64",
            "Lower end of its 95% interval.",
            ex[1],
            unit=diff,
            null_when=_FIT,
            section="9.5",
        ),
        Column(
            f"{e}_ci_high",
            "float64",
            "Upper end of its 95% interval.",
            ex[2],
            unit=diff,
            null_when=_FIT,
            section="9.5",
        ),
        Column(
            f"{e}_n",
            "int64",
            f"Test rows of the {e} endpoint at t.",
            ex[3],
            unit=COUNT,
            section="9.5",
        ),
        Column(f"{e}_status", "str", "fit or not fit.", "fit", section="9.5"),
        Column(
            f"{e}_success",
            "bool",
            "The verdict at t (ci_low > 0; false when not fit).",
            False,
            section="9.5",
        ),
    )


SWEEP = Table(
    "sweep",
    "confirm/sweep.csv",
    "bt confirm --forecast-token T1,T2,…",
    "one row per forecast point t of the post-hoc sweep (variant main); sweep.json holds the "
    "same rows and the counts the study quotes",
    (
        Column(
            "forecast_token",
            "int64",
            "The forecast point t: the summaries read each base run's first t tokens.",
            512,
            unit=TOKENS,
            section="9.5",
        ),
        Column(
            "preregistered",
            "bool",
            "Whether t is the pre-registered forecast point (512).",
            True,
            section="9.5",
        ),
        *_sweep_columns("primary"),
        *_sweep_columns("secondary"),
    ),
    section="9.5",
)

TABLES = (SIGNALS, PROBE_TABLE, CONFIRM, SWEEP)
