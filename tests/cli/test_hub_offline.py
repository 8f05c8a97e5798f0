"""What the README says about hub models is what happens: with HF_HUB_OFFLINE=1 a model that is
not in the local cache is refused in one line that says how to get it, and nothing is written."""

from __future__ import annotations

from pathlib import Path

from bt_cli import assert_one_line_error, run_bt

README = Path(__file__).resolve().parents[2] / "README.md"


def test_offline_missing_hub_model_is_one_line_and_writes_nothing(tmp_path):
    proc = run_bt(
        "base",
        "--cohort",
        "demo",
        "--limit",
        "1",
        "--max-tokens",
        "4",
        "--model",
        "no-such-org/no-such-model",
        "--runs-dir",
        tmp_path / "runs",
        HF_HUB_OFFLINE="1",
        HF_HOME=str(tmp_path / "hf"),
    )
    assert_one_line_error(
        proc,
        2,
        "no-such-org/no-such-model",
        "HF_HUB_OFFLINE",
        "hf download no-such-org/no-such-model",
    )
    assert not (tmp_path / "runs").exists()


def test_readme_says_what_really_happens_with_hub_models():
    text = " ".join(README.read_text().split())
    assert "nothing is downloaded at run time" not in text
    assert "HF_HUB_OFFLINE=1" in text and "downloads it" in text
