"""Stored hidden vectors of `bt base` / `bt sample` (protocol 2.2, --hidden-stride, default 8):
one checksummed .npz per trajectory under RUN/hidden/ indexed in the store's hidden_vectors
table; kill-safe (a SIGKILL between a file's rename and its sample's commit, and one mid-run,
then a rerun: complete, nothing duplicated, no orphan, finished samples' vectors unchanged); a
damaged file is refused in one line; a resume with another stride is refused, nothing written."""

from __future__ import annotations

import hashlib
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from bt_cli import BT, bt_env

from breakthrough.cli import main
from breakthrough.errors import BtError
from breakthrough.store import RunStore

# A child `bt sample` that SIGKILLs itself right after its first hidden-vector file is renamed
# into place, before that sample's transaction commits.
KILL_AFTER_RENAME = """
import os, signal, sys
import breakthrough.store.hidden as hidden
write = hidden._write_atomic
def write_then_die(path, data):
    write(path, data)
    os.kill(os.getpid(), signal.SIGKILL)
hidden._write_atomic = write_then_die
from breakthrough.cli import main
sys.argv = ["bt", *sys.argv[1:]]
main()
"""


def _bt(monkeypatch, capsys, *args) -> tuple[int, str]:
    """`bt ARGS` in this process, as the console script runs it: (exit code, stderr)."""
    monkeypatch.setattr(sys, "argv", ["bt", *map(str, args)])
    try:
        main()
    except SystemExit as done:
        return int(done.code or 0), capsys.readouterr().err
    return 0, capsys.readouterr().err


def _check_stored(
    run_dir: Path, stride: int, kind: str
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Every sample of `kind` has one file and one row agreeing with each other and with the
    sample; returns sample id -> (token indices, vectors)."""
    with RunStore(run_dir, readonly=True) as s:
        df = s.samples_frame(kind=kind, signals=True)
        table = s.hidden_table()
        check = s.verify_hidden()
        vectors = {int(sid): s.hidden_vectors(int(sid)) for sid in df["sample_id"]}
    assert check.ok and check.checked == len(df) > 0, (check.problems, check.orphans)
    assert sorted(table["sample_id"]) == sorted(int(x) for x in df["sample_id"])
    files = sorted(p.name for p in (run_dir / "hidden").iterdir())
    assert files == sorted(f"{sid}.npz" for sid in table["sample_id"])
    for row in table.itertuples():
        data = (run_dir / row.path).read_bytes()
        assert row.path == f"hidden/{row.sample_id}.npz" and row.stride == stride
        assert row.bytes == len(data) and row.sha256 == hashlib.sha256(data).hexdigest()
        with np.load(run_dir / row.path) as npz:
            assert set(npz.files) == {"token_index", "hidden"}
            assert npz["token_index"].dtype == np.int32 and npz["hidden"].dtype == np.float16
            assert npz["hidden"].shape == (row.rows, row.dim) == (row.rows, 64)
    for sample in df.itertuples():
        index, vec = vectors[int(sample.sample_id)]
        assert index.tolist() == list(range(0, sample.n_tokens, stride))
        # each vector is the state whose norm the decode step recorded for that token
        np.testing.assert_allclose(
            np.linalg.norm(vec.astype(np.float32), axis=1),
            sample.signals["hidden_norm"][index],
            rtol=2e-3,
        )
    return vectors


def test_base_stores_checksummed_vectors_and_a_damaged_file_is_one_line(
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
        "2",
        "--max-tokens",
        "20",
    )
    code, err = _bt(monkeypatch, capsys, *args)
    assert code == 0, err
    run = tmp_path / "r"
    vectors = _check_stored(run, 8, "base")
    with RunStore(run, readonly=True) as s:
        assert s.manifest()["hidden_stride"] == 8

    sid = min(vectors)
    path = run / "hidden" / f"{sid}.npz"
    data = bytearray(path.read_bytes())
    data[-40] ^= 0xFF  # one flipped byte inside the payload
    path.write_bytes(bytes(data))
    with RunStore(run, readonly=True) as s:
        with pytest.raises(BtError) as bad:
            s.hidden_vectors(sid)
        check = s.verify_hidden()
        other = s.hidden_vectors(max(vectors))  # the other file still reads
    msg = str(bad.value)
    assert "\n" not in msg and str(path) in msg and "checksum" in msg
    assert not check.ok and len(check.problems) == 1 and str(path) in check.problems[0]
    np.testing.assert_array_equal(other[1], vectors[max(vectors)][1])
    path.unlink()
    with RunStore(run, readonly=True) as s, pytest.raises(BtError, match=str(path)):
        s.hidden_vectors(sid)


def test_resuming_with_another_stride_is_refused_and_writes_nothing(
    tmp_path, tiny_model_dir, monkeypatch, capsys
):
    args = (
        "sample",
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
        "--attempts",
        "1",
        "--max-tokens",
        "10",
    )
    code, err = _bt(monkeypatch, capsys, *args)
    assert code == 0, err
    run = tmp_path / "attempts" / "r"
    _check_stored(run, 8, "attempt")
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    for extra in (("--hidden-stride", "4"), ("--hidden-stride", "0")):
        code, err = _bt(monkeypatch, capsys, *args, "--attempts", "2", *extra)
        assert code == 2 and err.count("\n") == 1, err
        assert "hidden_stride" in err and f"8 vs {extra[1]}" in err
        assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before
    # a backend that cannot return hidden states, asked for them: one line, nothing written
    code, err = _bt(
        monkeypatch,
        capsys,
        *args,
        "--run",
        "h",
        "--backend",
        "vllm",
        "--endpoint",
        "http://127.0.0.1:9",
        "--hidden-stride",
        "8",
    )
    assert code == 2 and err.count("\n") == 1 and "cannot return hidden states" in err, err
    code, err = _bt(monkeypatch, capsys, *args, "--run", "n", "--hidden-stride", "-1")
    assert code == 2 and err.count("\n") == 1 and "--hidden-stride" in err, err
    assert sorted(p.name for p in (tmp_path / "attempts").iterdir()) == ["r"]


def test_sample_killed_after_a_rename_and_mid_run_then_rerun_is_whole(
    tmp_path, tiny_model_dir, monkeypatch, capsys
):
    args = [
        "sample",
        "--cohort",
        "demo",
        "--model",
        str(tiny_model_dir),
        "--runs-dir",
        str(tmp_path),
        "--run",
        "k",
        "--attempts",
        "3",
        "--max-tokens",
        "24",
        "--limit",
        "3",
        "--batch-size",
        "1",
    ]
    run = tmp_path / "attempts" / "k"
    # 1. killed between the first file's rename and its sample's commit: an orphan file
    proc = subprocess.run(
        [sys.executable, "-c", KILL_AFTER_RENAME, *args],
        capture_output=True,
        text=True,
        env=bt_env(),
        timeout=120,
    )
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with RunStore(run, readonly=True) as s:
        assert not s.existing_keys("attempt")
        check = s.verify_hidden()
    assert check.checked == 0 and [p.name for p in check.orphans] == ["1.npz"]

    # 2. a rerun SIGKILLed once at least two attempts are committed
    proc = subprocess.Popen(
        [str(BT), *args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=bt_env()
    )
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        try:
            with RunStore(run, readonly=True) as s:
                if len(s.existing_keys("attempt")) >= 2:
                    break
        except BtError:
            pass  # a write in progress
        time.sleep(0.02)
    proc.send_signal(signal.SIGKILL)  # (nothing when it already ended)
    proc.wait()
    with RunStore(run, readonly=True) as s:
        first = {int(sid): s.hidden_vectors(int(sid)) for sid in s.hidden_table()["sample_id"]}
        assert 2 <= len(s.existing_keys("attempt")) == len(first) < 9
        assert s.verify_hidden().problems == []  # at most an orphan of the kill

    # 3. the rerun completes: every attempt once, every file named by its row, the vectors of
    # the attempts finished before the kill unchanged, equal to an uninterrupted run's
    code, err = _bt(monkeypatch, capsys, *args)
    assert code == 0, err
    code, err = _bt(monkeypatch, capsys, *args[:-1], "3", "--run", "clean")
    assert code == 0, err
    vectors = _check_stored(run, 8, "attempt")
    with RunStore(run, readonly=True) as s:
        df = s.samples_frame(arrays=False, kind="attempt")
    assert len(df) == 9 and not df.duplicated(["cell_id", "branch"]).any()
    for sid, (index, vec) in first.items():
        np.testing.assert_array_equal(vectors[sid][0], index)
        np.testing.assert_array_equal(vectors[sid][1], vec)
    with RunStore(tmp_path / "attempts" / "clean", readonly=True) as s:
        ref = s.samples_frame(arrays=False, kind="attempt")
        ref_vectors = {
            (r.cell_id, r.branch): s.hidden_vectors(r.sample_id) for r in ref.itertuples()
        }
    for r in df.itertuples():
        index, vec = ref_vectors[(r.cell_id, r.branch)]
        np.testing.assert_array_equal(vectors[r.sample_id][0], index)
        np.testing.assert_allclose(
            vectors[r.sample_id][1].astype(np.float32), vec.astype(np.float32), rtol=2e-3, atol=2e-3
        )
