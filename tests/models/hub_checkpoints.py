"""Tiny checkpoints shaped like the study's hub repositories, in a Hugging Face cache (issue 20).

For each registry alias (`gemma4-e4b`, `ministral3-3b`, `qwen3-4b`) `write_hub_cache` builds,
at test time, a random-weight model with the on-disk shape of the mlx-community 4-bit repository
the alias names: the same `config.json` structure and `model_type` (the multimodal wrappers
`gemma4` / `mistral3` with the text model under `text_config` and its weights under
`language_model.`, plus a few vision / audio weights that mlx-lm's wrapper `sanitize` must drop),
4-bit affine quantization with group size 64 done by mlx-lm's own `quantize_model` (which applies
the model class's `quant_predicate`), saved by mlx-lm's `save_model` / `save_config`, the
published special tokens, chat template (tests/models/hub/), `generation_config.json`, and for
Ministral the source repository's `SYSTEM_PROMPT.txt`. The sizes are tiny (hidden 64, 2-3
layers) and the tokenizer is byte-level with the real special tokens (at their real ids for
Gemma and Ministral), so the whole cache builds in about a second.

Each model lands in `$HF_HOME/hub/models--ORG--NAME/snapshots/<rev>/` (symlinks into `blobs/`)
with `refs/main`, exactly as `hf download` leaves it, so `bt` finds it with
HF_HUB_OFFLINE=1. Where each
shape comes from: tests/models/hub/README.md."""

from __future__ import annotations

import copy
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HUB_FILES = Path(__file__).parent / "hub"
TEMPLATES = Path(__file__).parent / "templates"
GROUP_SIZE, BITS = 64, 4  # mlx-lm's affine defaults, what `mlx_lm.convert -q` writes


@dataclass(frozen=True)
class HubShape:
    """One hub checkpoint's shape, at tiny size.

    specials: id -> token of the published special tokens kept (their real ids where `real_ids`);
    special=False tokens (Qwen3's <think>) are added as plain added tokens, as published.
    wrapper: the top-level config (without text_config / quantization); None for a text-only
    checkpoint whose config is the text config itself.
    extra_weights: (name, shape, quantized) of non-text tensors the real repository holds."""

    alias: str
    repo: str
    text_config: dict
    specials: dict[int, tuple[str, bool]]
    bos: str | None
    eos: str
    pad: str | None
    config_eos: tuple[str, ...]
    template: Path
    generation_config: dict
    wrapper: dict | None = None
    extra_weights: tuple[tuple[str, tuple[int, ...], bool], ...] = ()
    real_ids: bool = True
    source_repo: str | None = None
    source_files: dict[str, Path] = field(default_factory=dict)


def _gemma4_specials() -> dict[int, tuple[str, bool]]:
    # google/gemma-4-E4B-it tokenizer: <pad> 0, <eos> 1, <bos> 2, <unk> 3, <mask> 4,
    # <|tool_response> 50, <|think|> 98, <|channel> 100, <channel|> 101, <|turn> 105, <turn|> 106
    named = {
        0: "<pad>",
        1: "<eos>",
        2: "<bos>",
        3: "<unk>",
        4: "<mask>",
        46: "<|tool>",
        47: "<tool|>",
        48: "<|tool_call>",
        49: "<tool_call|>",
        50: "<|tool_response>",
        51: "<tool_response|>",
        98: "<|think|>",
        100: "<|channel>",
        101: "<channel|>",
        105: "<|turn>",
        106: "<turn|>",
    }
    return {i: (named.get(i, f"[unused{i}]"), True) for i in range(107)}


def _ministral3_specials() -> dict[int, tuple[str, bool]]:
    # Tekken (mistral-common v13) control tokens at their ids; the rest of the first 1000 ids
    # are <SPECIAL_n> placeholders in the real vocabulary.
    named = {
        0: "<unk>",
        1: "<s>",
        2: "</s>",
        3: "[INST]",
        4: "[/INST]",
        5: "[AVAILABLE_TOOLS]",
        6: "[/AVAILABLE_TOOLS]",
        7: "[TOOL_RESULTS]",
        8: "[/TOOL_RESULTS]",
        9: "[TOOL_CALLS]",
        10: "[IMG]",
        11: "<pad>",
        12: "[IMG_BREAK]",
        13: "[IMG_END]",
        14: "[PREFIX]",
        15: "[MIDDLE]",
        16: "[SUFFIX]",
        17: "[SYSTEM_PROMPT]",
        18: "[/SYSTEM_PROMPT]",
        19: "[TOOL_CONTENT]",
        32: "[ARGS]",
        33: "[CALL_ID]",
        34: "[THINK]",
        35: "[/THINK]",
    }
    return {i: (named.get(i, f"<SPECIAL_{i}>"), True) for i in range(36)}


_QWEN3_ADDED = (
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
)
# Published as added tokens with "special": false (they stay in decoded text).
_QWEN3_NOT_SPECIAL = {
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
}


def _qwen3_specials() -> dict[int, tuple[str, bool]]:
    # Real ids 151643..151668 follow the 151643-token BPE vocabulary; here they follow the tiny
    # one (`byte_tokenizer` gives them ids after its merges, in this published order).
    return {256 + i: (t, t not in _QWEN3_NOT_SPECIAL) for i, t in enumerate(_QWEN3_ADDED)}


SHAPES: dict[str, HubShape] = {
    "gemma4-e4b": HubShape(
        alias="gemma4-e4b",
        repo="mlx-community/gemma-4-e4b-it-4bit",
        wrapper={
            "architectures": ["Gemma4ForConditionalGeneration"],
            "model_type": "gemma4",
            "image_token_id": 258880,
            "audio_token_id": 258881,
            "boi_token_id": 255999,
            "eoi_token_id": 258882,
            "boa_token_id": 256000,
            "eoa_token_id": 258883,
            "initializer_range": 0.02,
            "tie_word_embeddings": True,
            "vision_config": {
                "model_type": "gemma4_vision",
                "hidden_size": 64,
                "num_hidden_layers": 1,
                "patch_size": 16,
            },
            "audio_config": {
                "model_type": "gemma4_audio",
                "hidden_size": 64,
                "num_hidden_layers": 1,
            },
        },
        text_config={
            "model_type": "gemma4_text",
            "hidden_size": 64,
            "num_hidden_layers": 4,
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "global_head_dim": 64,
            "hidden_size_per_layer_input": 64,
            # E4B: 42 layers (every 6th full attention, the last one too), the last 18 reuse the
            # K/V of the last earlier layer of their type; here layers 2-3 reuse 0-1's
            "num_kv_shared_layers": 2,
            "layer_types": ["sliding_attention", "full_attention"] * 2,
            "sliding_window": 32,  # E4B: 512; small so a short trace rotates the window
            "use_double_wide_mlp": False,
            "attention_k_eq_v": False,
            "enable_moe_block": False,
            "final_logit_softcapping": 30.0,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "hidden_activation": "gelu_pytorch_tanh",
            "max_position_embeddings": 131072,
            "rope_parameters": {
                "full_attention": {
                    "partial_rotary_factor": 0.25,
                    "rope_theta": 1000000.0,
                    "rope_type": "proportional",
                },
                "sliding_attention": {"rope_theta": 10000.0, "rope_type": "default"},
            },
            "pad_token_id": 0,
            "bos_token_id": 2,
            "eos_token_id": 1,
        },
        extra_weights=(
            ("vision_tower.encoder.layers.0.self_attn.q_proj.linear", (64, 64), True),
            ("vision_tower.encoder.layers.0.input_layernorm.weight", (64,), False),
            ("vision_tower.patch_embedder.input_proj.weight", (64, 768), False),
            ("vision_tower.patch_embedder.position_embedding_table", (2, 16, 64), False),
            ("vision_tower.std_bias", (64,), False),
            ("vision_tower.std_scale", (64,), False),
            ("embed_vision.embedding_projection", (64, 64), True),
            ("audio_tower.subsample_conv_projection.layer0.conv.weight", (8, 3, 3, 1), False),
            ("audio_tower.layers.0.feed_forward1.ffw_layer_1.linear", (128, 64), True),
            ("embed_audio.embedding_projection", (64, 64), True),
        ),
        specials=_gemma4_specials(),
        bos="<bos>",
        eos="<eos>",
        pad="<pad>",
        config_eos=("<eos>", "<turn|>"),
        template=HUB_FILES / "gemma4_e4b_it.jinja",
        generation_config={
            "bos_token_id": 2,
            "do_sample": True,
            "eos_token_id": [1, 106, 50],
            "pad_token_id": 0,
            "temperature": 1.0,
            "top_k": 64,
            "top_p": 0.95,
        },
    ),
    "ministral3-3b": HubShape(
        alias="ministral3-3b",
        repo="mlx-community/Ministral-3-3B-Reasoning-2512-4bit",
        wrapper={
            "architectures": ["Mistral3ForConditionalGeneration"],
            "model_type": "mistral3",
            "image_token_index": 10,
            "multimodal_projector_bias": False,
            "projector_hidden_act": "gelu",
            "spatial_merge_size": 2,
            "vision_feature_layer": -1,
            "vision_config": {
                "model_type": "pixtral",
                "hidden_size": 64,
                "num_hidden_layers": 1,
                "patch_size": 14,
                "image_size": 1540,
            },
        },
        text_config={
            "model_type": "ministral3",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 32,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": True,
            "max_position_embeddings": 262144,
            "sliding_window": None,
            "rope_parameters": {
                "rope_type": "yarn",
                "rope_theta": 1000000.0,
                "factor": 16.0,
                "original_max_position_embeddings": 16384,
                "beta_fast": 32.0,
                "beta_slow": 1.0,
                "mscale": 1.0,
                "mscale_all_dim": 1.0,
                "llama_4_scaling_beta": 0.1,
            },
        },
        extra_weights=(
            ("vision_tower.transformer.layers.0.attention.q_proj", (64, 64), True),
            ("vision_tower.ln_pre.weight", (64,), False),
            ("multi_modal_projector.norm.weight", (64,), False),
            ("multi_modal_projector.patch_merger.merging_layer", (64, 256), True),
            ("multi_modal_projector.linear_1", (64, 64), True),
        ),
        specials=_ministral3_specials(),
        bos="<s>",
        eos="</s>",
        pad="<pad>",
        config_eos=("</s>",),
        template=HUB_FILES / "ministral3_reasoning_2512.jinja",
        generation_config={
            "bos_token_id": 1,
            "eos_token_id": 2,
            "pad_token_id": 11,
            "max_length": 262144,
        },
        source_repo="mistralai/Ministral-3-3B-Reasoning-2512",
        source_files={"SYSTEM_PROMPT.txt": HUB_FILES / "ministral3_SYSTEM_PROMPT.txt"},
    ),
    "qwen3-4b": HubShape(
        alias="qwen3-4b",
        repo="mlx-community/Qwen3-4B-4bit",
        text_config={
            "architectures": ["Qwen3ForCausalLM"],
            "model_type": "qwen3",
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "head_dim": 64,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": True,
            "rope_theta": 1000000.0,
            "rope_scaling": None,
            "max_position_embeddings": 40960,
            "max_window_layers": 36,
            "use_sliding_window": False,
            "sliding_window": None,
            "attention_bias": False,
            "hidden_act": "silu",
            "torch_dtype": "bfloat16",
        },
        specials=_qwen3_specials(),
        bos=None,
        eos="<|im_end|>",
        pad="<|endoftext|>",
        config_eos=("<|im_end|>",),
        template=TEMPLATES / "qwen3.jinja",
        generation_config={"do_sample": True, "temperature": 0.6, "top_k": 20, "top_p": 0.95},
        real_ids=False,
    ),
}


# What the tiny tokenizers learn their merges from: the prompt text bt sends (the system prompts,
# MATH-style problem wording), so prompts are a few hundred tokens, not one token per byte.
_CORPUS = (
    (HUB_FILES / "ministral3_SYSTEM_PROMPT.txt").read_text(),
    "You are a careful mathematical assistant. Solve the problem and put your final answer "
    "within \\boxed{}. What is the value of $x$ if $2x + 3 = 7$? Find the number of positive "
    "integers less than 100 that are divisible by 3. Compute the sum of all real solutions. "
    "Let $f(x) = x^2 + 1$. How many ways are there to choose the answer? The answer is",
)
MERGES = 256


def byte_tokenizer(shape: HubShape) -> Any:
    """A byte-level BPE tokenizer (any text encodes) with 256 merges learnt from `_CORPUS`,
    whose special tokens are the published ones at `shape.specials`' ids, as a transformers fast
    tokenizer with the shape's chat template, BOS / EOS / PAD."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import PreTrainedTokenizerFast

    order = sorted(shape.specials)
    assert order == list(range(order[0], order[0] + len(order)))  # one contiguous block
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    if order[0] == 0:  # real ids: the special block first, then the byte alphabet and merges
        specials = [shape.specials[i][0] for i in order]
    else:  # after the byte alphabet and the merges, in the published order
        specials = []
    trainer = trainers.BpeTrainer(
        vocab_size=len(specials) + len(alphabet) + MERGES,
        special_tokens=specials,
        initial_alphabet=alphabet,
        show_progress=False,
    )
    core.train_from_iterator(_CORPUS, trainer)
    added = [
        AddedToken(shape.specials[i][0], special=shape.specials[i][1], normalized=False)
        for i in order
    ]
    core.add_tokens(added)
    for i in order:
        got = core.token_to_id(shape.specials[i][0])
        assert got == i or not shape.real_ids, (shape.specials[i][0], got, i)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=core,
        eos_token=shape.eos,
        bos_token=shape.bos,
        pad_token=shape.pad,
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = shape.template.read_text()
    return tok


def _revision(shape: HubShape) -> str:
    """A 40-hex commit id for the snapshot folder (stable per shape, like a hub commit)."""
    return hashlib.sha1(f"bt-test:{shape.repo}".encode()).hexdigest()


def _snapshot_dir(hf_home: Path, repo: str, rev: str) -> Path:
    org, name = repo.split("/")
    root = hf_home / "hub" / f"models--{org}--{name}"
    (root / "refs").mkdir(parents=True, exist_ok=True)
    (root / "refs" / "main").write_text(rev)
    snap = root / "snapshots" / rev
    snap.mkdir(parents=True, exist_ok=True)
    return snap


def _extra_tensors(shape: HubShape) -> dict:
    """Random vision / audio tensors under the real repository's prefixes, some 4-bit (stored as
    weight (uint32) + scales + biases), some float: the wrapper's `sanitize` must drop both."""
    import mlx.core as mx

    out = {}
    for name, shp, quantized in shape.extra_weights:
        w = mx.random.normal(shp) * 0.02
        if quantized:
            q, scales, biases = mx.quantize(w, group_size=GROUP_SIZE, bits=BITS)
            out.update({f"{name}.weight": q, f"{name}.scales": scales, f"{name}.biases": biases})
        else:
            out[name] = w
    return out


def write_checkpoint(snap: Path, shape: HubShape, *, seed: int = 0) -> Path:
    """Write the tiny 4-bit checkpoint of `shape` into the folder `snap`."""
    import mlx.core as mx
    from mlx_lm.utils import _get_classes, quantize_model, save_config, save_model

    tok = byte_tokenizer(shape)
    vocab = len(tok)
    ids = tok.convert_tokens_to_ids
    text = copy.deepcopy(shape.text_config)
    text["vocab_size"] = vocab
    if text["model_type"] == "gemma4_text":
        text["vocab_size_per_layer_input"] = vocab
    eos = [ids(t) for t in shape.config_eos]
    if shape.wrapper is None:
        cfg = {
            **text,
            "eos_token_id": eos[0] if len(eos) == 1 else eos,
            "bos_token_id": ids(shape.pad),
        }  # Qwen3: bos_token_id is <|endoftext|>
    else:
        cfg = {
            **copy.deepcopy(shape.wrapper),
            "text_config": text,
            "eos_token_id": eos[0] if len(eos) == 1 else eos,
        }
        # mlx-lm's gemma4 wrapper sets text_config.vocab_size from a top-level vocab_size
        # (default 262,144, the real vocabulary); the tiny vocabulary has to be said there.
        if cfg["model_type"] == "gemma4":
            cfg["vocab_size"] = vocab
    mx.random.seed(seed)
    model_cls, args_cls = _get_classes(cfg)
    model = model_cls(args_cls.from_dict(copy.deepcopy(cfg)))
    mx.eval(model.parameters())
    model, cfg = quantize_model(model, cfg, GROUP_SIZE, BITS)
    save_model(snap, model)
    extra = _extra_tensors(shape)
    if extra:  # the multimodal repository's non-text tensors, in the same weight file
        weights = dict(mx.load(str(snap / "model.safetensors")))
        weights.update(extra)
        mx.save_safetensors(str(snap / "model.safetensors"), weights, metadata={"format": "mlx"})
        index = json.loads((snap / "model.safetensors.index.json").read_text())
        index["weight_map"] = {k: "model.safetensors" for k in sorted(weights)}
        (snap / "model.safetensors.index.json").write_text(json.dumps(index, indent=4))
    save_config(cfg, snap / "config.json", keep_vision_config=shape.wrapper is not None)
    tok.save_pretrained(str(snap))
    gen = dict(shape.generation_config)
    if not shape.real_ids:  # Qwen3's ids, renumbered in the tiny vocabulary
        gen.update(
            {
                "bos_token_id": ids("<|endoftext|>"),
                "pad_token_id": ids("<|endoftext|>"),
                "eos_token_id": [ids("<|im_end|>"), ids("<|endoftext|>")],
            }
        )
    (snap / "generation_config.json").write_text(json.dumps(gen, indent=2))
    return snap


def _as_blobs(snap: Path) -> None:
    """Move the snapshot's files into the repository's `blobs/` (named by content hash) and leave
    relative symlinks, the layout `hf download` leaves on Linux and macOS."""
    blobs = snap.parent.parent / "blobs"
    blobs.mkdir(exist_ok=True)
    for f in sorted(p for p in snap.iterdir() if p.is_file() and not p.is_symlink()):
        blob = blobs / hashlib.sha256(f.read_bytes()).hexdigest()
        f.replace(blob)
        f.symlink_to(Path("..") / ".." / "blobs" / blob.name)


def write_hub_cache(hf_home: Path, aliases: tuple[str, ...] = tuple(SHAPES)) -> dict[str, Path]:
    """Build the tiny checkpoints of `aliases` into the HF cache at `hf_home` (and Ministral's
    source repository with its SYSTEM_PROMPT.txt): alias -> snapshot folder."""
    out = {}
    for alias in aliases:
        shape = SHAPES[alias]
        snap = _snapshot_dir(hf_home, shape.repo, _revision(shape))
        out[alias] = write_checkpoint(snap, shape)
        _as_blobs(snap)
        if shape.source_repo:
            src = _snapshot_dir(
                hf_home,
                shape.source_repo,
                hashlib.sha1(f"bt-test:{shape.source_repo}".encode()).hexdigest(),
            )
            for name, path in shape.source_files.items():
                (src / name).write_bytes(path.read_bytes())
            _as_blobs(src)
    return out
