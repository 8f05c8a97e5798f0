"""The one door to mlx-lm's internals: every name bt takes from inside mlx-lm comes from here.

bt uses mlx-lm for what it is good at (model classes, loading, tokenizers, its per-row caches)
and runs its own decode loop (`decode_batch`) on them. Two things still lean on names mlx-lm
does not promise: `row_attention` points the `scaled_dot_product_attention` name that mlx-lm's
model files imported at its own function (`route_attention`), and bt's batch caches
(`batch_cache.BatchLayerCache`) answer the cache calls mlx-lm's model code makes
(`update_and_fetch`, `make_mask` through `create_causal_mask`). So this module checks, when it
is first imported, that the installed mlx-lm is a version bt was tested with, and refuses any
other in one line naming the supported range (`mlx_version`; `EngineSpec` checks the same before
a command writes anything), before a decode step could fail deep inside mlx-lm.
Upgrading mlx-lm means: read these names' code in the new version, run the suite (the engine
tests compare tokens with mlx-lm's own generation), then widen `SUPPORTED` and the pin in
pyproject.toml together."""

from __future__ import annotations

import sys
from typing import Any

from breakthrough.engine.mlx_version import SUPPORTED, check_mlx_lm

MLX_LM_VERSION = check_mlx_lm()

# Only now, on a supported version, mlx-lm's internals.
from mlx_lm.models import base as _models_base  # noqa: E402
from mlx_lm.models.base import create_causal_mask  # noqa: E402
from mlx_lm.models.cache import (  # noqa: E402
    ArraysCache,
    KVCache,
    QuantizedKVCache,
    RotatingKVCache,
    make_prompt_cache,
)

# mlx-lm's own attention function, kept before any model module's name is pointed elsewhere,
# and its attention over quantized keys and values.
mlx_attention = _models_base.scaled_dot_product_attention
mlx_quantized_attention = _models_base.quantized_scaled_dot_product_attention


def route_attention(model: Any, attend: Any) -> bool:
    """Point the `scaled_dot_product_attention` name in the modules of `model`'s classes (mlx-lm's
    model files call it by the name they imported) at `attend`; True when at least one of them
    calls mlx-lm's function (or already `attend`). Process-wide for those modules: `attend` must
    hand every call it does not handle to `mlx_attention` unchanged."""
    modules = model.modules() if hasattr(model, "modules") else []
    names = {type(m).__module__ for m in modules} | {type(model).__module__}
    routed = False
    for name in sorted(names):
        module = sys.modules.get(name)
        current = getattr(module, "scaled_dot_product_attention", None)
        if current is mlx_attention:
            module.scaled_dot_product_attention = attend  # type: ignore[union-attr]
            routed = True
        elif current is attend:
            routed = True
    return routed


__all__ = [
    "MLX_LM_VERSION",
    "SUPPORTED",
    "ArraysCache",
    "KVCache",
    "QuantizedKVCache",
    "RotatingKVCache",
    "check_mlx_lm",
    "create_causal_mask",
    "make_prompt_cache",
    "mlx_attention",
    "mlx_quantized_attention",
    "route_attention",
]
