"""The engine records, per token, the entropy of the distribution it was drawn from (issue 6)."""

from __future__ import annotations

import math

import numpy as np

from breakthrough.engine.contract import GenRequest
from breakthrough.engine.mlx_backend import MlxEngine
from breakthrough.protocol import Sampling


def test_sampling_entropy_per_token(tiny_model) -> None:
    eng = MlxEngine.from_loaded(tiny_model, batch_size=4)
    prompt = tiny_model.encode("Count: one two three")
    reqs = [
        GenRequest(key="s", prompt=prompt, max_tokens=12, seed=3),
        GenRequest(
            key="g", prompt=prompt, max_tokens=12, seed=3, sampling=Sampling(temperature=0.0)
        ),
    ]
    res = {r.key: r for r in eng.generate(reqs)}
    s, g = res["s"], res["g"]
    assert len(s.sampling_entropies) == len(s.tokens) and len(g.sampling_entropies) == len(g.tokens)
    # At most top_k = 20 candidates: 0 <= H <= ln 20; positive for a near-flat random model.
    assert (s.sampling_entropies >= 0).all() and (s.sampling_entropies <= math.log(20) + 1e-4).all()
    assert s.sampling_entropies.mean() > 0.1
    assert np.array_equal(g.sampling_entropies, np.zeros(len(g.tokens), np.float32))


def test_sampling_entropy_is_stored(tmp_path, tiny_model_dir) -> None:
    from typer.testing import CliRunner

    from breakthrough.cli import app
    from breakthrough.store import RunStore

    res = CliRunner().invoke(
        app,
        [
            "base",
            "--cohort",
            "demo",
            "--model",
            str(tiny_model_dir),
            "--limit",
            "1",
            "--max-tokens",
            "6",
            "--runs-dir",
            str(tmp_path),
            "--run",
            "e",
        ],
    )
    assert res.exit_code == 0, res.output
    with RunStore(tmp_path / "e") as s:
        row = s.samples_frame().iloc[0]
    assert len(row["sampling_entropies"]) == 6 and np.isfinite(row["sampling_entropies"]).all()
