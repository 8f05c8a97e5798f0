"""Tiny random-weight models of the study's architectures, built through mlx-lm's own classes.

Each builder writes a normal mlx-lm folder (config.json, model.safetensors, tokenizer files,
chat template) that `breakthrough.models.loading.load_model` loads like a hub checkpoint, so the
family adapters, the segmentation and the engine's cache handling run on the real code paths:

* `gemma4_text`: sliding-window layers, so `make_prompt_cache` gives real `RotatingKVCache`
  layers (untrimmable once the window is full) next to a full-attention `KVCache` layer;
* `ministral3`: the Ministral-3 text model (all full attention, plain `KVCache`), with the
  checkpoint's SYSTEM_PROMPT.txt in the folder;
* `qwen3`: Qwen3 (plain `KVCache`);
* `qwen3_5`: Qwen3.5's hybrid model: gated-delta linear-attention layers keep a recurrent
  `ArraysCache` state (untrimmable at any length) next to `KVCache` layers.

The tokenizer of each is the SmolLM2 tokenizer with the real model's special tokens added, so
the prompt, the markers and the forced-close text tokenize into the real marker tokens. Where the
chat templates come from (and their licences): tests/models/templates/README.md."""

from __future__ import annotations

import copy
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from breakthrough.models.offline import save_model_folder

TEMPLATES = Path(__file__).parent / "templates"

# Ministral-3-Reasoning's SYSTEM_PROMPT.txt shape: text, a [THINK]...[/THINK] example, text.
# Written for the test from the public file's structure (see templates/README.md); the loader
# reads it from the folder exactly as it reads the checkpoint's own file.
MINISTRAL_SYSTEM_PROMPT = (
    "# HOW YOU SHOULD THINK AND ANSWER\n\n"
    "First draft your thinking process (inner monologue) until you arrive at a response. "
    "Format your response using Markdown, and use LaTeX for any mathematical equations.\n\n"
    "Your thinking process must follow the template below:"
    "[THINK]Your thoughts or/and draft, like working through an exercise on scratch paper."
    "[/THINK]Here, provide a self-contained response."
)


@dataclass(frozen=True)
class Architecture:
    """One study architecture: its mlx-lm model_type, config (tiny sizes), special tokens
    (added to the SmolLM2 vocabulary in this order), EOS tokens and template file."""

    name: str
    model_type: str
    config: dict
    special_tokens: tuple[str, ...]
    eos_tokens: tuple[str, ...]
    bos_token: str | None
    template: str
    family: str  # the bt family the template must be detected as

    def template_text(self) -> str:
        return (TEMPLATES / self.template).read_text()


ARCHITECTURES: dict[str, Architecture] = {
    "gemma4_text": Architecture(
        name="gemma4_text",
        model_type="gemma4_text",
        config={
            "hidden_size": 64,
            "num_hidden_layers": 3,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 1,
            "head_dim": 16,
            "global_head_dim": 32,
            "num_kv_shared_layers": 0,
            "hidden_size_per_layer_input": 8,
            # a window far below the study's 512 so short test traces rotate the cache
            "sliding_window": 32,
            "layer_types": ["sliding_attention", "sliding_attention", "full_attention"],
            "use_double_wide_mlp": False,
            "tie_word_embeddings": False,
            "max_position_embeddings": 32768,
        },
        special_tokens=(
            "<bos>",
            "<eos>",
            "<pad>",
            "<|turn>",
            "<turn|>",
            "<|think|>",
            "<|channel>",
            "<channel|>",
        ),
        eos_tokens=("<eos>", "<turn|>"),
        bos_token="<bos>",
        template="gemma4.jinja",
        family="gemma4",
    ),
    "ministral3": Architecture(
        name="ministral3",
        model_type="ministral3",
        config={
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "rms_norm_eps": 1e-5,
            "tie_word_embeddings": False,
            "max_position_embeddings": 262144,
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
        special_tokens=(
            "<s>",
            "</s>",
            "[INST]",
            "[/INST]",
            "[SYSTEM_PROMPT]",
            "[/SYSTEM_PROMPT]",
            "[THINK]",
            "[/THINK]",
        ),
        eos_tokens=("</s>",),
        bos_token="<s>",
        template="ministral3_reasoning.jinja",
        family="ministral3",
    ),
    "qwen3": Architecture(
        name="qwen3",
        model_type="qwen3",
        config={
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False,
            "rope_theta": 1000000.0,
            "max_position_embeddings": 32768,
        },
        special_tokens=("<think>", "</think>"),  # <|im_start|> / <|im_end|> are in SmolLM2's
        eos_tokens=("<|im_end|>",),
        bos_token=None,
        template="qwen3.jinja",
        family="qwen",
    ),
    "qwen3_5": Architecture(
        name="qwen3_5",
        model_type="qwen3_5",
        config={
            "hidden_size": 64,
            "num_hidden_layers": 2,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "head_dim": 16,
            "linear_num_value_heads": 4,
            "linear_num_key_heads": 2,
            "linear_key_head_dim": 16,
            "linear_value_head_dim": 16,
            "linear_conv_kernel_dim": 4,
            "full_attention_interval": 2,  # layer 0 linear (ArraysCache), layer 1 full attention
            "rms_norm_eps": 1e-6,
            "tie_word_embeddings": False,
            "max_position_embeddings": 32768,
        },
        special_tokens=("<think>", "</think>"),
        eos_tokens=("<|im_end|>",),
        bos_token=None,
        template="qwen3_5.jinja",
        family="qwen",
    ),
}


def architecture_tokenizer(base_tokenizer: Any, arch: Architecture) -> Any:
    """A copy of `base_tokenizer` (SmolLM2's) with `arch`'s special tokens, BOS/EOS and chat
    template: markers such as `<|channel>` or `[/THINK]` become single special tokens, as in the
    real vocabulary."""
    from tokenizers import AddedToken

    tok = copy.deepcopy(base_tokenizer)
    have = set(tok.get_vocab())
    new = [
        AddedToken(t, special=True, normalized=False) for t in arch.special_tokens if t not in have
    ]
    if new:
        tok.add_tokens(new, special_tokens=True)
    tok.eos_token = arch.eos_tokens[-1]
    if arch.bos_token:
        tok.bos_token = arch.bos_token
    tok.chat_template = arch.template_text()
    return tok


def write_architecture(
    out: Path,
    arch: Architecture,
    base_tokenizer: Any,
    *,
    seed: int = 0,
    silence: tuple[str, ...] = (),
) -> Path:
    """Write a random-weight mlx-lm folder of `arch` (float32) with its tokenizer. Tokens in
    `silence` get a zero head row (logit 0, never among the top-20 candidates of the random
    head): bench/long_trace.py silences EOS and the close marker so the base trace runs the full
    16,384 thinking tokens."""
    import mlx.core as mx
    from mlx_lm.utils import _get_classes

    tok = architecture_tokenizer(base_tokenizer, arch)
    vocab = len(tok)
    eos_ids = [tok.convert_tokens_to_ids(t) for t in arch.eos_tokens]
    cfg = {
        "model_type": arch.model_type,
        **copy.deepcopy(arch.config),
        "vocab_size": vocab,
        "eos_token_id": eos_ids if len(eos_ids) > 1 else eos_ids[0],
    }
    if arch.model_type == "gemma4_text":
        cfg["vocab_size_per_layer_input"] = vocab
    if arch.bos_token:
        cfg["bos_token_id"] = tok.convert_tokens_to_ids(arch.bos_token)
    mx.random.seed(seed)
    model_cls, args_cls = _get_classes(cfg)
    model = model_cls(args_cls.from_dict(cfg))
    # An untied random head with logit spread ~3 nats (as write_tiny_model): a real distribution
    # whose sampled rows differ.
    head = _lm_head(model)
    head.weight = mx.random.normal(head.weight.shape) * 0.4
    for t in silence:
        head.weight[tok.convert_tokens_to_ids(t)] = 0.0
    mx.eval(model.parameters())
    out = save_model_folder(out, model, cfg, tok)
    if arch.family == "ministral3":
        (out / "SYSTEM_PROMPT.txt").write_text(MINISTRAL_SYSTEM_PROMPT)
    return out


def _lm_head(model: Any) -> Any:
    for path in ("lm_head", "language_model.lm_head"):
        obj = model
        for part in path.split("."):
            obj = getattr(obj, part, None)
        if obj is not None:
            return obj
    raise AttributeError(f"{type(model).__name__} has no untied lm_head")
