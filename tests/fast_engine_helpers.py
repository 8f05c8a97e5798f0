"""Helpers that keep the engine tests' model compute down without changing what they test.

`lean_geometry_model`: `models.tiny.geometry_model` with a narrower residual stream. The KV
cache (layers x KV heads x head_dim), the query heads and the attention are the study
model's; only the hidden size, which no cache holds and no memory rule reads (`CacheBytes`
counts keys, values and attention scores), is 64 instead of 256, so every projection and
MLP matmul is four times smaller.

`greedy_references`: the fresh-prefill oracle (`reference_branch`) computed once per distinct
request. A greedy reference does not depend on its seed (temperature 0 is argmax), so two
branches at the same cut share one; a sampled one is computed per seed, as before.

`write_geometry_like`: the option matrix's geometry model folder, byte for byte as
`models.tiny.write_geometry_model` writes it, with the tokenizer files copied from the tiny
llama's folder instead of rebuilt from the GGUF."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

LEAN_HIDDEN = 64


def lean_geometry_model(
    name: str,
    vocab: int = 49_152,
    *,
    dtype: str = "float32",
    seed: int = 0,
    heads: int | None = None,
):
    """A random-weight mlx-lm `qwen3.Model` with study model `name`'s KV geometry and query
    heads (`heads` where the test takes fewer), hidden size `LEAN_HIDDEN`; built as
    `models.tiny.geometry_model` builds it."""
    import mlx.core as mx
    from mlx_lm.models import qwen3
    from models.tiny import geometry_config

    cfg = geometry_config(name, vocab, None, hidden=LEAN_HIDDEN, dtype=dtype, heads=heads)
    mx.random.seed(seed)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(cfg))
    if dtype != "float32":
        model.set_dtype(getattr(mx, dtype))
    mx.eval(model.parameters())
    return model


def greedy_references(
    engine: Any, loaded: Any, prompt: Sequence[int], trace: Sequence[int], protocol: Any
) -> Callable[[int, int, int], list[int]]:
    """`ref(cut, budget, seed)`: `reference_branch(engine, loaded, prompt, trace[:cut], budget,
    seed, protocol)`, the seed left out of the key when the protocol samples greedily."""
    from breakthrough.pipeline.branches import reference_branch

    greedy = protocol.sampling.temperature <= 0
    memo: dict[tuple[int, int, int | None], list[int]] = {}

    def ref(cut: int, budget: int, seed: int) -> list[int]:
        key = (cut, budget, None if greedy else seed)
        if key not in memo:
            memo[key] = reference_branch(
                engine, loaded, prompt, trace[:cut], budget, seed, protocol
            )
        return list(memo[key])

    return ref


TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "chat_template.jinja")


def write_geometry_like(out: Path, name: str, tokenizer_folder: Path, *, heads: int) -> Path:
    """`models.tiny.write_geometry_model(out, name, tok, heads=heads)` byte for byte, where
    `tok` is the tokenizer saved in `tokenizer_folder` (the tiny llama's: SmolLM2's, as
    `write_tiny_model` saved it): its files are copied instead of rebuilding the tokenizer from
    the GGUF (seconds of CPU) only to save it again."""
    import json
    import shutil

    from mlx_lm.utils import save_model
    from models.tiny import geometry_config, geometry_model

    source = json.loads((tokenizer_folder / "config.json").read_text())
    vocab, eos = source["vocab_size"], source["eos_token_id"]  # len(tok), tok.eos_token_id
    cfg = geometry_config(name, vocab, eos, heads=heads)
    model = geometry_model(name, vocab, heads=heads)
    out.mkdir(parents=True, exist_ok=True)
    save_model(out, model)  # as breakthrough.models.offline.save_model_folder
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    for file in TOKENIZER_FILES:
        if (tokenizer_folder / file).is_file():
            shutil.copyfile(tokenizer_folder / file, out / file)
    return out
