"""A local model is found again by its weights wherever it is on this machine (issue 52, failure
2), through the installed `bt`: the index keeps every folder known for a weights digest, checks
them in turn, drops only what is gone or changed and never records a folder that did not load;
an identical copy named beside its original is one model and one run, in a dry run too.

Each test keeps its own `BT_CACHE_DIR`, so the index it reads is the one its commands wrote."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from bt_cli import assert_one_line_error, run_bt
from shared_runs import ARITH_BASE, SMALL_CONTINUE


def _index(cache: Path) -> dict:
    path = cache / "models" / "local-folders.json"
    return json.loads(path.read_text()) if path.is_file() else {}


def test_a_run_finds_its_model_in_any_folder_that_still_holds_it(tiny_model_dir, tmp_path):
    cache = tmp_path / "cache"
    first = Path(shutil.copytree(tiny_model_dir, tmp_path / "M"))
    copy = Path(shutil.copytree(first, tmp_path / "M2"))
    runs = tmp_path / "runs"
    for folder, run in ((first, "r"), (copy, "r2")):
        proc = run_bt(
            "base", *ARITH_BASE, "--model", folder, "--runs-dir", runs, "--run", run,
            BT_CACHE_DIR=str(cache),
        )  # fmt: skip
        assert proc.returncode == 0, proc.stderr
    # one model (one digest), both folders, newest first
    assert list(_index(cache).values()) == [[str(copy.resolve()), str(first.resolve())]]

    shutil.rmtree(copy)  # the copy loaded last is gone; the first folder is intact
    proc = run_bt("continue", runs / "r", *SMALL_CONTINUE, BT_CACHE_DIR=str(cache))
    assert proc.returncode == 0, proc.stderr
    assert list(_index(cache).values()) == [[str(first.resolve())]]  # only the gone one dropped

    # the last folder changed (another network): refused, naming what was checked
    config = json.loads((first / "config.json").read_text())
    (first / "config.json").write_text(json.dumps({**config, "rms_norm_eps": 1e-3}))
    proc = run_bt("continue", runs / "r2", *SMALL_CONTINUE, BT_CACHE_DIR=str(cache))
    assert_one_line_error(proc, 2, "no folder with these weights", f"{first.resolve()} (changed)")
    assert _index(cache) == {}


def test_a_folder_that_failed_to_load_is_not_recorded(tiny_model_dir, tmp_path):
    cache = tmp_path / "cache"
    broken = Path(shutil.copytree(tiny_model_dir, tmp_path / "broken"))
    (broken / "model.safetensors").write_bytes(b"not weights")
    proc = run_bt(
        "base", *ARITH_BASE, "--model", broken, "--runs-dir", tmp_path / "runs",
        BT_CACHE_DIR=str(cache),
    )  # fmt: skip
    assert_one_line_error(proc, 2, "cannot load model", str(broken))
    assert _index(cache) == {}


def test_an_identical_copy_named_beside_its_folder_is_one_model(tiny_model_dir, tmp_path):
    """`--model FOLDER,COPY`: one run, in the dry run as in the real one (the dry run took the
    copy for a second model, `runs/r-m` and `runs/r-m2`); a copy with an edited config of the
    same size is another model."""
    first = Path(shutil.copytree(tiny_model_dir, tmp_path / "M"))
    copy = Path(shutil.copytree(first, tmp_path / "M2"))
    other = Path(shutil.copytree(first, tmp_path / "M3"))
    text = (other / "config.json").read_text()
    assert '"rms_norm_eps": 1e-05' in text
    (other / "config.json").write_text(
        text.replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 1e-06')
    )
    runs = tmp_path / "runs"
    args = ("base", *ARITH_BASE, "--runs-dir", runs, "--run", "r", "--dry-run")
    proc = run_bt(*args, "--model", f"{first},{copy}", BT_CACHE_DIR=str(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr
    assert f"--model {copy}: the same model as {first}" in proc.stdout, proc.stdout
    assert "runs/r (" in proc.stdout.replace(str(runs), "runs") and "r-m2" not in proc.stdout
    proc = run_bt(*args, "--model", f"{first},{other}", BT_CACHE_DIR=str(tmp_path / "cache"))
    assert proc.returncode == 0, proc.stderr
    assert "the same model" not in proc.stdout and "r-m3" in proc.stdout, proc.stdout


def test_a_folder_without_its_tokenizer_is_one_line_naming_the_file(tiny_model_dir, tmp_path):
    """It was transformers' five-line error from inside `from_pretrained`."""
    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "M"))
    (folder / "tokenizer.json").unlink()
    _refused_naming_tokenizer_json(folder, tmp_path)


def test_a_folder_with_only_slow_tokenizer_files_is_one_line_naming_tokenizer_json(
    tiny_model_dir, tmp_path
):
    """vocab.json and merges.txt left where tokenizer.json should be: the file check passes,
    transformers cannot build this tokenizer class from them and said so in five lines that
    never name tokenizer.json; now one line names it, before the weights are read."""
    folder = Path(shutil.copytree(tiny_model_dir, tmp_path / "M"))
    bpe = json.loads((folder / "tokenizer.json").read_text())["model"]
    (folder / "vocab.json").write_text(json.dumps(bpe["vocab"]))
    merges = (m if isinstance(m, str) else " ".join(m) for m in bpe["merges"])
    (folder / "merges.txt").write_text("#version: 0.2\n" + "\n".join(merges) + "\n")
    (folder / "tokenizer.json").unlink()
    _refused_naming_tokenizer_json(folder, tmp_path, "vocab.json")


def test_an_identical_copy_named_beside_its_folder_is_recorded_for_the_run(
    tiny_model_dir, tmp_path
):
    """`bt base --model M,C,X` with C a copy of M: one run for M and C, and C recorded as a
    folder of that model (it was not), so the run continues from C once M is gone; X, of the
    same size but another config, is its own model and never recorded for M's id."""
    cache = tmp_path / "cache"
    first = Path(shutil.copytree(tiny_model_dir, tmp_path / "M"))
    copy = Path(shutil.copytree(first, tmp_path / "C"))
    other = Path(shutil.copytree(first, tmp_path / "X"))
    text = (other / "config.json").read_text()
    (other / "config.json").write_text(
        text.replace('"rms_norm_eps": 1e-05', '"rms_norm_eps": 1e-06')
    )
    runs = tmp_path / "runs"
    proc = run_bt(
        "base", *ARITH_BASE, "--model", f"{first},{copy},{other}", "--runs-dir", runs,
        "--run", "r", BT_CACHE_DIR=str(cache),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert sorted(p.name for p in runs.iterdir()) == ["r-m", "r-x"]
    index = _index(cache)
    assert sorted(index.values()) == [
        [str(first.resolve()), str(copy.resolve())],  # the folder that loaded first
        [str(other.resolve())],
    ]

    shutil.rmtree(first)
    proc = run_bt("continue", runs / "r-m", *SMALL_CONTINUE, BT_CACHE_DIR=str(cache))
    assert proc.returncode == 0, proc.stderr
    assert sorted(_index(cache).values()) == [[str(copy.resolve())], [str(other.resolve())]]


def test_bt_sample_records_an_identical_copy_named_beside_its_folder(tiny_model_dir, tmp_path):
    """`bt sample --model M,C` (one run, as for `bt base`) records the copy C as a folder of the
    model once M has loaded; it recorded M alone."""
    cache = tmp_path / "cache"
    first = Path(shutil.copytree(tiny_model_dir, tmp_path / "M"))
    copy = Path(shutil.copytree(first, tmp_path / "C"))
    runs = tmp_path / "runs"
    proc = run_bt(
        "sample", *ARITH_BASE, "--attempts", "1", "--model", f"{first},{copy}",
        "--runs-dir", runs, "--run", "s", BT_CACHE_DIR=str(cache),
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert [p.name for p in (runs / "attempts").iterdir()] == ["s"]
    assert list(_index(cache).values()) == [[str(first.resolve()), str(copy.resolve())]]


def test_a_copy_of_a_folder_that_failed_to_load_is_not_recorded(tiny_model_dir, tmp_path):
    """The copies are recorded once their model has loaded, never before."""
    cache = tmp_path / "cache"
    broken = Path(shutil.copytree(tiny_model_dir, tmp_path / "broken"))
    (broken / "model.safetensors").write_bytes(b"not weights")
    copy = Path(shutil.copytree(broken, tmp_path / "copy"))
    proc = run_bt(
        "base", *ARITH_BASE, "--model", f"{broken},{copy}", "--runs-dir", tmp_path / "runs",
        BT_CACHE_DIR=str(cache),
    )  # fmt: skip
    assert_one_line_error(proc, 2, "cannot load model", str(broken))
    assert _index(cache) == {}


def _refused_naming_tokenizer_json(folder: Path, tmp_path, *also: str) -> None:
    """`bt base` of `folder` is one line, exit 2, naming the folder and the missing
    tokenizer.json (and `also`), and no run is written."""
    runs = tmp_path / "runs"
    proc = run_bt(
        "base", *ARITH_BASE, "--model", folder, "--runs-dir", runs,
        BT_CACHE_DIR=str(tmp_path / "cache"),
    )  # fmt: skip
    assert_one_line_error(proc, 2, str(folder), "no tokenizer.json", *also)
    assert not runs.exists() or not any(runs.iterdir())
