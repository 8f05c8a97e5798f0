"""A run made under other settings is refused naming the setting that differs (not only two
digests), and before any model weights are loaded."""

from __future__ import annotations

import sys

import breakthrough.pipeline.trajectories as trajectories
from breakthrough.cli import main


def _bt(monkeypatch, capsys, *args) -> tuple[int, str]:
    """`bt ARGS` in this process, as the console script runs it: (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["bt", *map(str, args)])
    try:
        main()
    except SystemExit as done:
        return done.code, capsys.readouterr().err
    return 0, capsys.readouterr().err


def test_base_refuses_other_max_tokens_before_loading_the_model(
    tmp_path, tiny_model_dir, monkeypatch, capsys
):
    args = (
        "base",
        "--cohort",
        "demo",
        "--model",
        tiny_model_dir,
        "--runs-dir",
        tmp_path,
        "--run",
        "r",
        "--limit",
        "1",
    )
    monkeypatch.setattr(sys, "argv", ["bt", *map(str, args), "--max-tokens", "16"])
    main()
    capsys.readouterr()

    def no_loading(*a, **k):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(trajectories, "load_model", no_loading)
    code, err = _bt(monkeypatch, capsys, *args, "--max-tokens", "48")
    assert code == 2 and err.count("\n") == 1, err
    assert "protocol.base_max_tokens" in err and "16 vs 48" in err


def test_base_with_an_identical_copy_of_the_model_is_the_same_run(
    tmp_path, tiny_model_dir, monkeypatch, capsys
):
    import json
    import shutil

    copy = tmp_path / "elsewhere" / tiny_model_dir.name
    shutil.copytree(tiny_model_dir, copy)
    common = (
        "base",
        "--cohort",
        "demo",
        "--runs-dir",
        tmp_path / "runs",
        "--run",
        "r",
        "--limit",
        "1",
        "--max-tokens",
        "8",
    )
    monkeypatch.setattr(sys, "argv", ["bt", *map(str, common), "--model", str(tiny_model_dir)])
    main()
    monkeypatch.setattr(
        sys, "argv", ["bt", *map(str, common), "--model", str(copy), "--limit", "2"]
    )
    main()  # not refused: the same weights
    capsys.readouterr()
    code, err = _bt(monkeypatch, capsys, "export", tmp_path / "runs" / "r", "-f", "csv")
    assert code == 0, err
    text = (tmp_path / "runs" / "r" / "export" / "manifest.json").read_text()
    manifest = json.loads(text)
    assert manifest["model_id"].startswith("local:")
    assert str(tmp_path) not in text and str(tiny_model_dir.parent) not in text


def test_continue_refuses_another_backend_before_writing_or_loading(
    tmp_path, tiny_model_dir, monkeypatch, capsys
):
    import json
    import sqlite3

    import breakthrough.pipeline.cell_loop as cell_loop

    code, err = _bt(
        monkeypatch,
        capsys,
        "base",
        "--cohort",
        "demo",
        "--model",
        tiny_model_dir,
        "--runs-dir",
        tmp_path,
        "--run",
        "r",
        "--limit",
        "1",
        "--max-tokens",
        "8",
    )
    assert code == 0, err
    run = tmp_path / "r"
    before = (run / "store.sqlite").read_bytes()

    def no_loading(*a, **k):
        raise AssertionError("the model was loaded before the refusal")

    monkeypatch.setattr(cell_loop, "load_model", no_loading)
    code, err = _bt(
        monkeypatch,
        capsys,
        "continue",
        run,
        "--backend",
        "mlx-fresh",
        "--anchors",
        "2",
        "--samples",
        "1",
        "--budget",
        "4",
    )
    assert code == 2 and err.count("\n") == 1, err
    assert "engine.backend='mlx'" in err and "mlx-fresh" in err
    assert (run / "store.sqlite").read_bytes() == before
    with sqlite3.connect(f"file:{run / 'store.sqlite'}?mode=ro", uri=True) as c:
        stored = json.loads(
            c.execute("SELECT value FROM manifest WHERE key='protocol'").fetchone()[0]
        )
    assert stored["anchors"] != [2]
