"""Stored hidden vectors (`GenRequest.hidden_stride`, protocol 2.2): the MLX engine returns the
final-normalised state whose logits drew each kept token, equal (within float16 rounding) to a
teacher-forced forward with the position shift written out: the vector of generated token k is
the state at the position that READS token k - 1 (`teacher_force(...).hidden[k - 1]`), and for
k = 0 the prompt's last position. The same vectors alone, in a batch, through a shared prefix,
with mlx-fresh, and on the step's accelerator (MLX graph) branch."""

from __future__ import annotations

import numpy as np
import pytest

from breakthrough.engine.contract import GenRequest, SharedPrefix, check_request
from breakthrough.engine.mlx_backend import MlxEngine
from breakthrough.errors import BtError

PROMPT = [2, 10, 11, 12, 13, 14, 15]
STRIDE = 3
MAX_TOKENS = 12  # a multiple of the stride: the step ahead computes token 12's state, dropped


def _eos(model) -> list[int]:
    """An EOS id the random head practically never draws (the last vocabulary id is a special
    token of the tiny architectures), so rows run to max_tokens."""
    lm = getattr(model, "language_model", model)  # a multimodal wrapper's text model
    return [int(lm.args.vocab_size) - 1] if hasattr(lm, "args") else [1]


def _teacher_forced(model, prompt: list[int], tokens: list[int]) -> np.ndarray:
    """Row k: the final-normalised state whose logits drew generated token k, from one forward:
    k = 0 the prompt's last position (`final_hidden`), k >= 1 `teacher_force(...).hidden[k-1]`
    (teacher_force's row j reads generated token j)."""
    import mlx.core as mx

    from breakthrough.models.hidden_states import final_hidden, teacher_force, text_model

    _, inner = text_model(model)
    first = np.array(final_hidden(inner, mx.array([prompt]))[0, -1].astype(mx.float32))
    forced = teacher_force(model, prompt, tokens, max_tokens=len(tokens)).hidden
    return np.concatenate([first[None, :], forced[: len(tokens) - 1]], axis=0)


def _generate(engine: MlxEngine, reqs: list[GenRequest]) -> dict:
    return {r.key: r for r in engine.generate(reqs)}


@pytest.mark.model
@pytest.mark.parametrize("arch", ["qwen3", "gemma4_text", "gemma4-e4b", "ministral3-3b"])
def test_recorded_vectors_are_the_states_that_drew_each_kept_token(request, arch):
    """Float architectures and the 4-bit hub-shaped checkpoints (multimodal wrappers)."""
    models = request.getfixturevalue("hub_models" if "-" in arch else "architecture_models")
    model = models[arch].model
    req = GenRequest("h", PROMPT, MAX_TOKENS, seed=7, hidden_stride=STRIDE)
    res = _generate(MlxEngine(model, _eos(model), batch_size=1), [req])["h"]
    n = len(res.tokens)
    assert n == MAX_TOKENS
    index, vectors = res.hidden
    assert index.dtype == np.int32 and vectors.dtype == np.float16
    assert index.tolist() == list(range(0, n, STRIDE))  # 12 (the step ahead) is dropped
    want = _teacher_forced(model, PROMPT, res.tokens)
    assert vectors.shape == (len(index), want.shape[1])
    got = vectors.astype(np.float32)
    scale = np.abs(want).max()
    np.testing.assert_allclose(got, want[index], rtol=2e-3, atol=2e-3 * scale, err_msg=arch)
    # the shift matters: the state that READS token k (one position later) is another vector
    shifted = np.concatenate([want[1:], want[-1:]])[index]
    assert np.abs(got - shifted).max() > 50 * np.abs(got - want[index]).max()


def test_alone_equals_in_a_batch_through_a_shared_prefix_and_fresh(architecture_models):
    model = architecture_models["qwen3"].model
    eos = _eos(model)
    req = GenRequest("h", PROMPT, MAX_TOKENS, seed=7, hidden_stride=STRIDE)
    alone = _generate(MlxEngine(model, eos, batch_size=1), [req])["h"]
    others = [
        GenRequest(
            f"o{i}", [3 + i] * (4 + 3 * i), 5 + 4 * i, seed=20 + i, hidden_stride=(0, 2, 5)[i]
        )
        for i in range(3)
    ]
    batch = _generate(MlxEngine(model, eos, batch_size=4), [others[0], req, *others[1:]])
    shared = SharedPrefix("cell", tuple(PROMPT + [40, 41, 42]), starts=(len(PROMPT),))
    reused = _generate(
        MlxEngine(model, eos, batch_size=4),
        [GenRequest("h", PROMPT, MAX_TOKENS, seed=7, hidden_stride=STRIDE, shared_prefix=shared)],
    )["h"]
    fresh = _generate(MlxEngine(model, eos, batch_size=4, reuse_prefixes=False), [req])["h"]
    for name, res in (("batch", batch["h"]), ("shared prefix", reused), ("mlx-fresh", fresh)):
        assert res.tokens == alone.tokens, name
        assert res.hidden[0].tolist() == alone.hidden[0].tolist(), name
        np.testing.assert_allclose(
            res.hidden[1].astype(np.float32),
            alone.hidden[1].astype(np.float32),
            rtol=2e-3,
            atol=2e-3,
            err_msg=name,
        )
    assert batch["o0"].hidden is None  # stride 0: none asked, none returned
    for key, stride in (("o1", 2), ("o2", 5)):
        index, vectors = batch[key].hidden
        assert index.tolist() == list(range(0, len(batch[key].tokens), stride))
        assert vectors.shape[0] == len(index)


def test_accelerator_branch_of_the_step_records_the_same_vectors(architecture_models, monkeypatch):
    """The decode step's MLX-graph branch (Metal / CUDA), run on this CPU: same vectors."""
    from breakthrough.engine import batch_step

    model = architecture_models["qwen3"].model
    req = GenRequest("h", PROMPT, MAX_TOKENS, seed=7, hidden_stride=STRIDE)
    want = _generate(MlxEngine(model, _eos(model), batch_size=2), [req])["h"]
    monkeypatch.setattr(batch_step.mx, "default_device", lambda: "accelerator")
    got = _generate(MlxEngine(model, _eos(model), batch_size=2), [req])["h"]
    assert got.tokens == want.tokens and got.hidden[0].tolist() == want.hidden[0].tolist()
    np.testing.assert_allclose(
        got.hidden[1].astype(np.float32), want.hidden[1].astype(np.float32), rtol=2e-3, atol=2e-3
    )


@pytest.mark.parametrize("stride", [-1, 1.5, True])
def test_a_bad_stride_is_refused_by_every_backend(stride):
    with pytest.raises(BtError, match="hidden_stride must be an integer >= 0"):
        check_request(GenRequest("k", [1, 2], 4, seed=0, hidden_stride=stride), set())


def test_http_backends_refuse_hidden_vectors_in_one_line():
    check_request(
        GenRequest("k", [1, 2], 4, seed=0), set(), hidden_states=False
    )  # none asked: fine
    with pytest.raises(BtError) as err:
        check_request(
            GenRequest("k", [1, 2], 4, seed=0, hidden_stride=8), set(), hidden_states=False
        )
    msg = str(err.value)
    assert "\n" not in msg and "HTTP backend cannot return hidden states" in msg
    assert "--hidden-stride 0" in msg
