"""Random-weight mlx-lm models the tests and the benches build in seconds, kept out of the
installed package (the wheel ships only what `bt` runs): the tiny llama most engine and
pipeline tests generate with, and qwen3 models with a study model's KV geometry (the memory
tests). Each writer saves a normal mlx-lm folder with a real tokenizer (SmolLM2's, rebuilt from
the offline package's GGUF) through `breakthrough.models.offline.save_model_folder`, so `bt`
loads it like any checkpoint. bench/ imports this file by path (tests/ on sys.path)."""

from __future__ import annotations

from pathlib import Path

from breakthrough.models.offline import save_model_folder, tokenizer_from_gguf


def write_tiny_model(
    out: Path,
    tokenizer=None,
    *,
    layers: int = 2,
    hidden: int = 64,
    heads: int = 4,
    kv_heads: int = 2,
    intermediate: int = 128,
    seed: int = 0,
    vocab: int | None = None,
) -> Path:
    """A random-weight llama mlx-lm folder with a real tokenizer (default: SmolLM2's, rebuilt
    from the GGUF). Float32 weights, so a decode step costs next to nothing on the CPU.
    `vocab`: embedding and head rows (default: the tokenizer's; more rows than it has are ids
    that decode to nothing, the bench's wide-vocabulary model)."""
    import mlx.core as mx
    from mlx_lm.models import llama

    tok = tokenizer if tokenizer is not None else tokenizer_from_gguf()
    vocab = vocab or len(tok)
    cfg = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": layers,
        "intermediate_size": intermediate,
        "num_attention_heads": heads,
        "num_key_value_heads": kv_heads,
        "rms_norm_eps": 1e-5,
        "vocab_size": vocab,
        "rope_theta": 10000.0,
        "max_position_embeddings": 8192,
        "tie_word_embeddings": False,
        "eos_token_id": tok.eos_token_id,
    }
    mx.random.seed(seed)
    model = llama.Model(llama.ModelArgs.from_dict(cfg))
    # An untied random head with logit spread ~3 nats: peaked enough to be a distribution,
    # spread enough that sampled rows differ (a tied head just repeats the input token).
    model.lm_head.weight = mx.random.normal(model.lm_head.weight.shape) * 0.4
    mx.eval(model.parameters())
    return save_model_folder(out, model, cfg, tok)


# The study models' KV geometry: layers x KV heads x head_dim, and query heads.
STUDY_GEOMETRIES = {
    "qwen3-4b": dict(layers=36, heads=32, kv_heads=8, head_dim=128),
    "ministral-3-3b": dict(layers=26, heads=32, kv_heads=8, head_dim=128),
}


def geometry_config(
    name: str,
    vocab: int,
    eos: int | None,
    *,
    hidden: int = 256,
    dtype: str = "float32",
    heads: int | None = None,
    layers: int | None = None,
    intermediate: int | None = None,
) -> dict:
    """A qwen3 `config.json` with the KV geometry of study model `name` (STUDY_GEOMETRIES) and
    a small hidden size, so the matmuls stay cheap while every cache holds what the study
    model's does per token."""
    g = STUDY_GEOMETRIES[name]
    return {
        "model_type": "qwen3",
        "architectures": ["Qwen3ForCausalLM"],
        "hidden_size": hidden,
        "num_hidden_layers": layers or g["layers"],
        "intermediate_size": intermediate or 2 * hidden,
        "num_attention_heads": heads or g["heads"],
        "num_key_value_heads": g["kv_heads"],
        "head_dim": g["head_dim"],
        "rms_norm_eps": 1e-6,
        "vocab_size": vocab,
        "rope_theta": 1_000_000.0,
        "max_position_embeddings": 40_960,
        "tie_word_embeddings": True,
        "torch_dtype": dtype,
        "eos_token_id": eos,
    }


def geometry_model(
    name: str,
    vocab: int = 49_152,
    *,
    dtype: str = "float32",
    seed: int = 0,
    heads: int | None = None,
    layers: int | None = None,
    hidden: int = 256,
):
    """A random-weight mlx-lm `qwen3.Model` with study model `name`'s KV geometry
    (`geometry_config`), built through mlx-lm's own classes. `heads`: fewer query heads than
    the study model's (the KV cache is the same; the CPU's unfused attention is cheaper);
    `layers`: fewer layers (each layer's attention and cache as the study model's: for tests of
    what one layer does, at a fraction of the time); `hidden`: the residual stream's width,
    which no cache holds and no memory rule reads (64 makes every projection and MLP matmul
    four times cheaper than the default 256)."""
    import mlx.core as mx
    from mlx_lm.models import qwen3

    cfg = geometry_config(name, vocab, None, hidden=hidden, dtype=dtype, heads=heads, layers=layers)
    mx.random.seed(seed)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(cfg))
    if dtype != "float32":
        model.set_dtype(getattr(mx, dtype))
    mx.eval(model.parameters())
    return model


def write_geometry_model(
    out: Path,
    name: str,
    tokenizer=None,
    *,
    seed: int = 0,
    heads: int | None = None,
    layers: int | None = None,
    hidden: int = 256,
    intermediate: int | None = None,
    vocab: int | None = None,
    bits: int | None = None,
    dtype: str = "float32",
) -> Path:
    """`geometry_model` saved as an mlx-lm folder with a real tokenizer (SmolLM2's by default;
    the qwen family is chosen by the loader's caller), what `bt base --model` and the benches
    load. `hidden`, `intermediate`, `vocab` (ids past the tokenizer's decode to nothing) and
    `bits` (weights quantized by MLX's `nn.quantize`, group 64, as `mlx_lm.convert -q` writes
    them) give the study model's real shapes: Qwen3-4B is hidden 2560, intermediate 9728, vocab
    151,936, 4 bits (bench/gpu_check.sh)."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.models import qwen3

    tok = tokenizer or tokenizer_from_gguf()
    size = vocab or len(tok)
    cfg = geometry_config(
        name,
        size,
        tok.eos_token_id,
        hidden=hidden,
        dtype=dtype,
        heads=heads,
        layers=layers,
        intermediate=intermediate,
    )
    mx.random.seed(seed)
    model = qwen3.Model(qwen3.ModelArgs.from_dict(cfg))
    if dtype != "float32":
        model.set_dtype(getattr(mx, dtype))
    if bits:
        nn.quantize(model, group_size=64, bits=bits)
        for layer in [model.model.embed_tokens, *model.model.layers]:  # one layer at a time
            mx.eval(layer.parameters())
        cfg["quantization"] = {"group_size": 64, "bits": bits}
    mx.eval(model.parameters())
    return save_model_folder(out, model, cfg, tok)
