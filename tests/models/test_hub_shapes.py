"""The study's checkpoints as published (issue 20, point 3): tiny 4-bit checkpoints with the
on-disk shape of the hub repositories the registry aliases name (tests/models/hub_checkpoints.py,
sources in tests/models/hub/README.md) load through bt exactly as the real ones would, and the
README's first-day commands run on them through the installed `bt` with HF_HUB_OFFLINE=1 from an
empty working directory."""

from __future__ import annotations

import json

import mlx.nn as nn
import pandas as pd
import pytest
from bt_cli import run_bt
from mlx.utils import tree_flatten

from breakthrough.models.families import build_prompt_ids
from breakthrough.models.loading import load_model
from breakthrough.models.segments import FINAL_ANSWER, SOLUTION, SPECIAL, segment_ids
from breakthrough.models.segments import THINKING as THINKING_CODE
from breakthrough.protocol import DEFAULT_SYSTEM
from breakthrough.store import RunStore
from models.hub_checkpoints import HUB_FILES, SHAPES, _revision

SYSTEM_PROMPT = (HUB_FILES / "ministral3_SYSTEM_PROMPT.txt").read_text()
QUANT = {"group_size": 64, "bits": 4, "mode": "affine"}


def _snapshot(hub_home, repo):
    org, name = repo.split("/")
    root = hub_home / "hub" / f"models--{org}--{name}"
    return root / "snapshots" / (root / "refs" / "main").read_text()


@pytest.mark.parametrize("alias", list(SHAPES))
def test_the_cache_holds_each_repository_as_published(hub_home, alias):
    import mlx.core as mx

    shape = SHAPES[alias]
    snap = _snapshot(hub_home, shape.repo)
    assert snap.name == _revision(shape)
    files = {p.name: p for p in snap.iterdir()}
    assert {
        "config.json",
        "model.safetensors",
        "model.safetensors.index.json",
        "tokenizer.json",
        "tokenizer_config.json",
        "chat_template.jinja",
        "generation_config.json",
    } <= set(files)
    assert all(p.is_symlink() and p.resolve().parent.name == "blobs" for p in files.values())
    cfg = json.loads((snap / "config.json").read_text())
    assert cfg["quantization"] == QUANT and cfg["quantization_config"] == QUANT
    weights = mx.load(str(snap / "model.safetensors"))
    index = json.loads((snap / "model.safetensors.index.json").read_text())
    assert set(index["weight_map"]) == set(weights)
    if shape.wrapper is None:
        assert cfg["model_type"] == "qwen3" and "text_config" not in cfg
        text_prefix = "model."
    else:
        assert cfg["model_type"] == shape.wrapper["model_type"]
        assert cfg["text_config"]["model_type"] == shape.text_config["model_type"]
        assert "vision_config" in cfg
        text_prefix = "language_model."
        for name, _, quantized in shape.extra_weights:  # the tensors the wrapper must drop
            assert (f"{name}.scales" in weights) if quantized else (name in weights)
    # every matrix of the text model is 4-bit (uint32-packed with scales and biases), as
    # mlx-lm's conversion leaves it: norms stay float
    mats = [
        k[: -len(".weight")]
        for k, v in weights.items()
        if k.startswith(text_prefix) and k.endswith(".weight") and v.dtype == mx.uint32
    ]
    assert mats and all(f"{m}.scales" in weights and f"{m}.biases" in weights for m in mats)
    assert any("embed_tokens" in m for m in mats)
    floats = [
        k
        for k, v in weights.items()
        if k.startswith(text_prefix) and k.endswith(".weight") and v.dtype != mx.uint32
    ]
    assert floats and all("norm" in k for k in floats)
    assert (snap / "chat_template.jinja").read_text() == shape.template.read_text()
    if shape.source_repo:
        src = _snapshot(hub_home, shape.source_repo)
        assert (src / "SYSTEM_PROMPT.txt").read_text() == SYSTEM_PROMPT
        assert not (snap / "SYSTEM_PROMPT.txt").exists()  # read from the source repo


# The chat prompt bt sends, as the published template renders it (system turn, one user turn,
# generation prompt; Gemma with enable_thinking=True, Ministral with its SYSTEM_PROMPT.txt as three
# chunks, Qwen3 with enable_thinking=True).
RENDERED = {
    "gemma4-e4b": (
        "<bos><|turn>system\n<|think|>\n" + DEFAULT_SYSTEM + "<turn|>\n"
        "<|turn>user\nWhat is 2+2?<turn|>\n<|turn>model\n"
    ),
    "ministral3-3b": "<s>[SYSTEM_PROMPT]"
    + SYSTEM_PROMPT
    + "[/SYSTEM_PROMPT][INST]What is 2+2?[/INST]",
    "qwen3-4b": (
        "<|im_start|>system\n" + DEFAULT_SYSTEM + "<|im_end|>\n"
        "<|im_start|>user\nWhat is 2+2?<|im_end|>\n<|im_start|>assistant\n"
    ),
}
FAMILY = {"gemma4-e4b": "gemma4", "ministral3-3b": "ministral3", "qwen3-4b": "qwen"}
# (open, close) marker ids in the published vocabularies (Qwen3's are renumbered, see SHAPES)
MARKER_IDS = {"gemma4-e4b": ([100], [101]), "ministral3-3b": ([34], [35])}
# EOS ids bt stops on: mlx-lm reads generation_config.json's eos_token_id over config.json's
# (Gemma-4: <eos>, <turn|> and <|tool_response>; Qwen3: <|im_end|> and <|endoftext|>), and the
# tokenizer's EOS joins them (protocol 1.5)
EOS = {
    "gemma4-e4b": {"<eos>", "<turn|>", "<|tool_response>"},
    "ministral3-3b": {"</s>"},
    "qwen3-4b": {"<|im_end|>", "<|endoftext|>"},
}


TRACE = {
    "gemma4-e4b": "<|channel>thought\nx=2<channel|>So \\boxed{4}<turn|>",
    "ministral3-3b": "[THINK]x=2[/THINK]So \\boxed{4}</s>",
    "qwen3-4b": "<think>\nx=2\n</think>\n\nSo \\boxed{4}<|im_end|>",
}
THINKING = {"gemma4-e4b": "\nx=2", "ministral3-3b": "x=2", "qwen3-4b": "\nx=2\n"}


@pytest.mark.parametrize("alias", list(SHAPES))
def test_bt_loads_each_alias_as_the_study_did(hub_models, alias):
    loaded = hub_models[alias]
    shape = SHAPES[alias]
    assert loaded.model_id == shape.repo and loaded.alias == alias
    assert loaded.revision == f"{shape.repo}@{_revision(shape)}"
    assert loaded.family.name == FAMILY[alias]
    # the wrapper's sanitize dropped every vision / audio tensor; the text model is all 4-bit
    names = [k for k, _ in tree_flatten(loaded.model.parameters())]
    assert not [k for k in names if "vision" in k or "audio" in k or "projector" in k]
    linear = [
        m
        for _, m in loaded.model.named_modules()
        if isinstance(m, (nn.Linear, nn.Embedding, nn.QuantizedLinear, nn.QuantizedEmbedding))
    ]
    assert linear and all(
        isinstance(m, (nn.QuantizedLinear, nn.QuantizedEmbedding))
        and m.bits == 4
        and m.group_size == 64
        for m in linear
    )
    tok = loaded.tokenizer
    # EOS: the union of the tokenizer's and the config's (protocol 1.5) holds the published ones
    assert {tok.convert_tokens_to_ids(t) for t in EOS[alias]} == set(loaded.eos_ids)
    ids = build_prompt_ids(tok, loaded.family, "What is 2+2?")
    assert tok.decode(ids) == RENDERED[alias]
    fam = loaded.family
    open_ids, close_ids = loaded.encode(fam.open_marker), loaded.encode(fam.close_marker)
    assert len(close_ids) == 1 and len(loaded.encode(fam.forced_close)) >= 1
    if alias in MARKER_IDS:
        assert (open_ids[:1], close_ids) == MARKER_IDS[alias]
    if alias == "ministral3-3b":
        assert fam.system_message == SYSTEM_PROMPT
    # a reasoning trace as the model writes it, segmented on the real marker tokens
    trace = loaded.encode(TRACE[alias])
    seg = segment_ids(tok, trace, fam)
    runs = [int(c) for i, c in enumerate(seg) if i == 0 or c != seg[i - 1]]
    assert runs == [SPECIAL, THINKING_CODE, SPECIAL, SOLUTION, FINAL_ANSWER], seg
    assert (
        tok.decode([t for t, c in zip(trace, seg, strict=True) if c == THINKING_CODE])
        == THINKING[alias]
    )


def test_a_runs_hub_id_finds_ministrals_system_prompt_in_the_source_repo(hub_home, monkeypatch):
    """A run's manifest records the hub id, not the alias: `bt continue` loads that id, and the
    mlx-community 4-bit repository holds no SYSTEM_PROMPT.txt. bt found it only through the
    alias (regression: `bt continue` on a ministral3-3b run failed)."""
    import huggingface_hub.constants as hf_constants

    monkeypatch.setattr(hf_constants, "HF_HUB_CACHE", str(hub_home / "hub"))
    repo = SHAPES["ministral3-3b"].repo
    loaded = load_model(repo, family="ministral3")
    assert loaded.family.system_message == SYSTEM_PROMPT
    assert load_model(repo).family.name == "ministral3"  # detected from the template too


def _ok(proc):
    assert proc.returncode == 0, (proc.stdout[-2000:], proc.stderr[-2000:])
    assert "Traceback" not in proc.stdout + proc.stderr
    return proc


def test_the_readme_first_day_path_on_the_hub_shaped_checkpoints(hub_home, tmp_path):
    """README's pipeline, at tiny budgets, from an empty directory, HF_HUB_OFFLINE=1, through
    the installed `bt`: base (both study models) -> continue -> classify, then sample ->
    signals -> probe, and qwen3-4b through base."""
    work = tmp_path / "work"
    work.mkdir()
    env = {"HF_HOME": str(hub_home), "HF_HUB_OFFLINE": "1"}

    def bt(*args):
        return _ok(run_bt(*args, cwd=work, timeout=600, **env))

    bt(
        "base",
        "--cohort",
        "math89",
        "--limit",
        "2",
        "--model",
        "gemma4-e4b,ministral3-3b",
        "--max-tokens",
        "24",
    )
    bt(
        "continue",
        "--anchors",
        "4,8",
        "--budget",
        "4",
        "--answer-budget",
        "4",
        "--restarts",
        "4",
        "--samples",
        "2",
        "--batch-size",
        "4",
    )
    bt("classify", "runs/")
    for alias in ("gemma4-e4b", "ministral3-3b"):
        shape = SHAPES[alias]
        with RunStore(work / "runs" / f"math89-{alias}", readonly=True) as s:
            man = s.manifest()
            df = s.samples_frame(arrays=False)
        assert man["model_id"] == shape.repo and man["family"] == FAMILY[alias]
        assert man["model_revision"] == f"{shape.repo}@{_revision(shape)}"
        assert (df["kind"] == "base").sum() == 2
        assert set(df["kind"]) == {"base", "probe", "restart"}
    assert (work / "runs" / "classify" / "index.html").is_file()
    labels = pd.read_csv(work / "runs" / "classify" / "labels.csv")
    assert len(labels) == 4

    bt(
        "sample",
        "--cohort",
        "math89",
        "--limit",
        "2",
        "--model",
        "gemma4-e4b",
        "--attempts",
        "3",
        "--max-tokens",
        "16",
    )
    attempts = work / "runs" / "attempts" / "math89-gemma4-e4b"
    bt("signals", attempts)
    assert len(pd.read_parquet(attempts / "signals.parquet")) == 6
    proc = bt("probe", attempts, "--anchors", "4", "--max-tokens", "8", "--bootstrap", "20")
    assert "6 trajectories, model mlx-community/gemma-4-e4b-it-4bit" in proc.stdout
    assert "Warning" not in proc.stderr, proc.stderr  # e.g. an empty figure legend
    table = pd.read_csv(attempts / "probe" / "probe_table.csv")
    assert (table.rows == 6).all()

    bt("base", "--cohort", "math89", "--limit", "1", "--model", "qwen3-4b", "--max-tokens", "8")
    with RunStore(work / "runs" / "math89-qwen3-4b", readonly=True) as s:
        assert s.manifest()["model_id"] == SHAPES["qwen3-4b"].repo
        assert len(s.samples_frame(arrays=False)) == 1
