"""The stream-summary arm of protocol 9.8 (breakthrough/signals/probe.py) on planted data: when
the entropy stream decides which attempts of a problem succeed and the hidden vectors are noise,
the stream arm finds it within problems and the hidden arm does not; both arms score the same
rows; the features are `summaries.summarize` of the first t tokens only."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from breakthrough.signals.probe import (
    ProbeData,
    anchor_vectors,
    format_table,
    probe_table,
    select_sets,
    stream_summaries,
)
from breakthrough.signals.summaries import STREAM_SUMMARIES, summarize

N_PROBLEMS, ATTEMPTS, TOKENS, DIM = 24, 12, 40, 4
ANCHORS = (8, 32)


def _planted(seed: int = 0) -> ProbeData:
    """Problems of graded difficulty (harder: higher entropy throughout). Within a problem, a
    successful attempt's entropy falls over its tokens and a failed one's rises; surprisal and
    top-1 probability are noise, and every hidden state is independent noise, so only the
    stream arm has anything to find within problems."""
    rng = np.random.default_rng(seed)
    pid, correct, vectors, streams = [], [], [], []
    j = np.arange(TOKENS)
    for p in range(N_PROBLEMS):
        rate = (p + 0.5) / N_PROBLEMS
        n_ok = int(round(rate * ATTEMPTS))
        level = 2.0 - 1.5 * rate  # the difficulty offset of the problem's entropy
        for k in range(ATTEMPTS):
            ok = k < n_ok
            entropy = level + (-0.04 if ok else 0.04) * j + rng.normal(0, 0.15, TOKENS)
            surprisal = rng.exponential(1.0, TOKENS)
            top1 = rng.uniform(0.2, 1.0, TOKENS)
            hidden = rng.normal(0, 1.0, (TOKENS, DIM))
            pid.append(f"p{p:02d}")
            correct.append(ok)
            vectors.append(anchor_vectors(hidden, ANCHORS))
            streams.append(stream_summaries(entropy, surprisal, top1, ANCHORS))
    return ProbeData.from_rows(pid, correct, vectors, ANCHORS, streams=streams)


@pytest.fixture(scope="module")
def planted_result():
    data = _planted()
    return data, probe_table(data, n_boot=100)


def test_the_stream_arm_finds_what_noise_hidden_states_cannot(planted_result):
    _, res = planted_result
    t = res.table
    assert list(t.arm) == ["hidden", "hidden", "stream", "stream", "loo"]
    assert list(t.score) == ["probe"] * 4 + ["loo"]
    stream = t[t.arm == "stream"]
    hidden = t[t.arm == "hidden"]
    assert list(stream.t) == list(hidden.t) == list(ANCHORS)
    for _, r in stream.iterrows():
        assert r.within_failure_weighted >= 0.9 and r.within_pair_weighted >= 0.9
        assert (
            r.within_failure_weighted_lo
            <= r.within_failure_weighted
            <= r.within_failure_weighted_hi
        )
        assert r.pooled >= 0.9 and r.pooled_lo <= r.pooled <= r.pooled_hi
    for _, r in hidden.iterrows():
        assert abs(r.within_failure_weighted - 0.5) < 0.1
        assert abs(r.within_pair_weighted - 0.5) < 0.1
        assert r.within_failure_weighted_lo < 0.5 < r.within_failure_weighted_hi


def test_both_arms_score_the_same_rows(planted_result):
    """The same rows give StratifiedGroupKFold the same folds: the arms differ by features only."""
    data, res = planted_result
    t = res.table
    for anchor in ANCHORS:
        h, s = (t[(t.arm == a) & (t.t == anchor)].iloc[0] for a in ("hidden", "stream"))
        assert (h.rows, h.pooled_rows, h.within_rows, h.within_problems) == (
            s.rows,
            s.pooled_rows,
            s.within_rows,
            s.within_problems,
        )
        scored_h = np.isfinite(res.scores[anchor])
        scored_s = np.isfinite(res.stream_scores[anchor])
        assert (scored_h == scored_s).all() and scored_h.sum() == h.rows
    lines = format_table(t)
    assert [ln.split()[:2] for ln in lines[1:]] == [
        ["8", "hidden"],
        ["32", "hidden"],
        ["8", "stream"],
        ["32", "stream"],
        ["LOO", "loo"],
    ]


def test_a_short_trajectory_drops_out_of_both_arms_alike():
    data = _planted()
    data.streams[32][::3] = np.nan  # a third of the rows never reach t = 32 in the stream arm
    res = probe_table(data, n_boot=0)
    t = res.table
    pooled, within = select_sets(data.problem_id, data.correct)
    reach = (pooled | within) & np.isfinite(data.streams[32]).all(axis=1)
    at32 = t[t.t == 32]
    assert list(at32.arm) == ["hidden", "stream"]
    assert (at32.rows == reach.sum()).all() and reach.sum() < (pooled | within).sum()
    assert (np.isfinite(res.scores[32]) == reach).all()  # the hidden arm drops them too


def test_stream_features_are_the_summaries_of_the_first_t_tokens():
    rng = np.random.default_rng(3)
    entropy, surprisal, top1 = rng.exponential(1.0, (3, 20))
    feats = stream_summaries(entropy, surprisal, top1, (4, 8, 16, 32))
    assert set(feats) == {4, 8, 16}  # 32 lies beyond the 20 tokens
    for t, f in feats.items():
        want = summarize(
            {"entropy": entropy, "surprisal": surprisal, "top1_probability": top1}, window=t
        )
        assert f.shape == (len(STREAM_SUMMARIES),)
        np.testing.assert_array_equal(f, [want[k] for k in STREAM_SUMMARIES])
    # tokens after t change nothing at t; a token before t does
    later = entropy.copy()
    later[8:] += 5.0
    np.testing.assert_array_equal(stream_summaries(later, surprisal, top1, (8,))[8], feats[8])
    earlier = entropy.copy()
    earlier[7] += 5.0
    assert not np.allclose(stream_summaries(earlier, surprisal, top1, (8,))[8], feats[8])
    # by hand at t = 4: entropy mean / std / OLS slope, surprisal max one-step rise
    e, s = entropy[:4], surprisal[:4]
    slope = np.polyfit(np.arange(4.0), e, 1)[0]
    f4 = dict(zip(STREAM_SUMMARIES, feats[4], strict=True))
    assert f4["stream_entropy_mean"] == pytest.approx(e.mean())
    assert f4["stream_entropy_std"] == pytest.approx(e.std())
    assert f4["stream_entropy_ols_slope"] == pytest.approx(slope)
    assert f4["stream_surprisal_max_rise"] == pytest.approx(np.diff(s).max())


def test_without_streams_the_hidden_arm_runs_alone():
    data = _planted()
    alone = ProbeData(data.problem_id, data.correct, data.features, data.top1)
    t = probe_table(alone, n_boot=0).table
    assert list(t.arm) == ["hidden", "hidden", "loo"]
    assert isinstance(t, pd.DataFrame) and t.columns[0] == "arm"
