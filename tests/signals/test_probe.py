"""The pure probe pipeline of protocol 9.8 (breakthrough/signals/probe.py) on planted data:
a within-problem direction is found, a difficulty-only signal ties every within pair, the LOO
reference reverses every within pair."""

from __future__ import annotations

import numpy as np
import pytest

from breakthrough.signals.probe import (
    ProbeData,
    anchor_vectors,
    format_table,
    probe_table,
    select_sets,
)

N_PROBLEMS, ATTEMPTS, DIM = 24, 12, 16


def _planted(within_signal: bool, seed: int = 0) -> ProbeData:
    """Problems of graded difficulty; each problem has its own offset in feature space that
    encodes its difficulty along one axis. With `within_signal`, a second direction decides
    which attempts of a problem succeed; without it, every attempt of a problem has the same
    features (a difficulty-only signal)."""
    rng = np.random.default_rng(seed)
    pid, correct, feats = [], [], []
    direction = np.zeros(DIM)
    direction[1] = 1.0
    for p in range(N_PROBLEMS):
        rate = (p + 0.5) / N_PROBLEMS
        n_ok = int(round(rate * ATTEMPTS))
        ys = np.r_[np.ones(n_ok), np.zeros(ATTEMPTS - n_ok)].astype(bool)
        offset = rng.normal(0, 1.0, DIM)
        offset[0] = 4.0 * (rate - 0.5)  # the difficulty axis
        offset[1] = 0.0
        for yi in ys:
            x = offset.copy()
            if within_signal:
                x = x + (2.0 if yi else -2.0) * direction + rng.normal(0, 0.3, DIM)
            pid.append(f"p{p:02d}")
            correct.append(bool(yi))
            feats.append({4: x, 8: x * 1.0})
    return ProbeData.from_rows(
        pid, correct, feats, anchors=(4, 8), top1=rng.uniform(0.8, 1.0, len(pid))
    )


def _analysed(data: ProbeData) -> np.ndarray:
    """Rows in the pooled or the within set (what the probe trains and scores on)."""
    pooled, within = select_sets(data.problem_id, data.correct)
    return pooled | within


def test_planted_direction_is_found_within_problems():
    res = probe_table(_planted(within_signal=True), n_boot=200)
    t = res.table
    probe = t[t.score == "probe"]
    assert list(probe.t) == [4, 8]
    for _, r in probe.iterrows():
        assert r.within_failure_weighted >= 0.9
        assert r.within_pair_weighted >= 0.9
        assert (
            r.within_failure_weighted_lo
            <= r.within_failure_weighted
            <= r.within_failure_weighted_hi
        )
        assert r.pooled_lo <= r.pooled <= r.pooled_hi
        assert (
            r.rows
            == _analysed(res_data := _planted(within_signal=True)).sum()
            == res_data.correct.size - 2 * (ATTEMPTS - 8)
        )


def test_difficulty_only_signal_ties_every_within_pair():
    res = probe_table(_planted(within_signal=False), n_boot=200)
    t = res.table
    probe = t[t.score == "probe"]
    assert (probe.within_failure_weighted == 0.5).all()
    assert (probe.within_pair_weighted == 0.5).all()
    assert (probe.pooled > 0.8).all()


def test_loo_reference_reverses_every_within_pair():
    res = probe_table(_planted(within_signal=False), n_boot=100)
    loo = res.table[res.table.score == "loo"].iloc[0]
    assert loo.within_failure_weighted == 0.0
    assert loo.within_pair_weighted == 0.0
    assert loo.pooled > 0.7  # between-problem pairs still ordered by difficulty
    assert 0.8 <= res.top1_mean <= 1.0 and 0.8 <= res.top1_p10 <= res.top1_mean


def test_sets_follow_the_protocol():
    pid = np.array([f"p{i // 10}" for i in range(30)], dtype=object)
    correct = np.zeros(30, dtype=bool)
    correct[10:15] = True  # p1: 5/10, mid band; p0: 0/10, p2: 10/10
    correct[20:30] = True
    pooled, within = select_sets(pid, correct)
    for p in ("p0", "p1", "p2"):
        assert pooled[pid == p].sum() == 8
    assert within.sum() == 10 and within[10:20].all()
    again = select_sets(pid, correct)
    assert (again[0] == pooled).all()  # seeded: the same draw every time


def test_anchor_vectors_average_the_four_tokens_before_t():
    hidden = np.arange(40, dtype=np.float32).reshape(10, 4)
    v = anchor_vectors(hidden, (4, 8, 16))
    assert set(v) == {4, 8}
    assert np.allclose(v[4], hidden[0:4].mean(0))
    assert np.allclose(v[8], hidden[4:8].mean(0))


def test_short_trajectories_drop_out_of_late_anchors_and_the_table_prints():
    data = _planted(within_signal=True)
    data.features[8][::2] = np.nan  # half the rows never reach t = 8
    res = probe_table(data, n_boot=0)
    t = res.table
    reach = _analysed(data) & ~np.isnan(data.features[8]).any(axis=1)
    assert int(t[t.t == 8].rows.iloc[0]) == reach.sum() < _analysed(data).sum()
    assert np.isnan(t.pooled_lo).all()
    lines = format_table(t)
    assert lines[1].split()[0] == "4" and lines[-1].split()[0] == "LOO"


def test_widths_must_agree():
    with pytest.raises(ValueError, match="widths"):
        ProbeData.from_rows(["a", "b"], [True, False], [{4: np.zeros(3)}, {4: np.zeros(5)}], (4,))
