"""Protocol 1.5 at its boundaries, one token either side.

* `max_prompt_tokens` (2,048; protocol 1.3/1.5): a prompt of exactly the limit is accepted,
  one token more is refused (`build_prompt_ids`, and `bt base` through the console script).
* the total cap per branch (16,384 = prefix + continuation + inserted close + answer; protocol
  1.5, 3.3 step 1): B + answer reserve fitting exactly is accepted, one token more is refused
  (`check_budget`), and `plan_cell` keeps the anchor whose prefix fits exactly and stops at the
  previous anchor one token later (protocol 3.1: probing stops at the previous anchor).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from bt_cli import assert_one_line_error, run_bt

from breakthrough.errors import BtError
from breakthrough.models.families import build_prompt_ids
from breakthrough.pipeline.branches import Branch, BranchRunner, check_budget
from breakthrough.pipeline.cell_loop import plan_cell
from breakthrough.protocol import DEFAULT, Sampling
from breakthrough.tasks.family import user_message

LIMIT = DEFAULT.max_prompt_tokens  # 2,048
CAP = DEFAULT.total_cap  # 16,384
B, ANSWER = DEFAULT.budget, DEFAULT.answer_budget  # 1,024, 512


# ---------------------------------------------------------------------------------------------
# max_prompt_tokens


def _row(words: int, pid: str = "p1") -> dict:
    """A math row whose prompt grows by one token per filler word (" cat" is one token)."""
    return {
        "id": pid,
        "family": "math",
        "stage": "test",
        "selection": "boundary",
        "standin": False,
        "problem": "What is 3+4?" + " cat" * words,
        "answer": "7",
        "level": 1,
        "subject": "Prealgebra",
        "source_row": 0,
    }


def _prompt_len(model, words: int) -> int:
    return len(
        build_prompt_ids(
            model.tokenizer,
            model.family,
            user_message(_row(words), "plain"),
            max_prompt_tokens=10 * LIMIT,
        )
    )


def _words_for(model, tokens: int) -> int:
    """Filler words that make the prompt exactly `tokens` long."""
    words = tokens - _prompt_len(model, 0)
    assert _prompt_len(model, words) == tokens and _prompt_len(model, words + 1) == tokens + 1
    return words


def test_prompt_of_exactly_the_limit_is_accepted_one_more_is_refused(tiny_model):
    words = _words_for(tiny_model, LIMIT)
    tok, fam = tiny_model.tokenizer, tiny_model.family
    at = build_prompt_ids(tok, fam, user_message(_row(words), "plain"), max_prompt_tokens=LIMIT)
    assert len(at) == LIMIT
    with pytest.raises(BtError) as err:
        build_prompt_ids(tok, fam, user_message(_row(words + 1), "plain"), max_prompt_tokens=LIMIT)
    assert str(err.value) == (
        f"prompt has {LIMIT + 1:,} tokens, over the --max-prompt-tokens limit of {LIMIT:,}"
    )
    # the limit is the protocol's constant, not a fixed number: one more token is allowed
    over = build_prompt_ids(
        tok, fam, user_message(_row(words + 1), "plain"), max_prompt_tokens=LIMIT + 1
    )
    assert len(over) == LIMIT + 1


def _cohort(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture(scope="module")
def refused_over(tmp_path_factory, tiny_model_dir, tiny_model):
    """`bt base` (installed script) on a cohort whose one prompt is one token over the limit:
    (runs dir, the finished process). The same command line both tests below check, run once."""
    tmp = tmp_path_factory.mktemp("over")
    over = _cohort(tmp / "over.jsonl", [_row(_words_for(tiny_model, LIMIT) + 1, "p_over")])
    proc = run_bt(
        "base",
        "--cohort",
        over,
        "--model",
        tiny_model_dir,
        "--runs-dir",
        tmp / "runs",
        "--run",
        "over",
        "--max-tokens",
        "2",
    )
    return tmp / "runs", proc


def test_bt_base_at_the_prompt_limit(tmp_path, tiny_model_dir, tiny_model, refused_over):
    words = _words_for(tiny_model, LIMIT)
    at = _cohort(tmp_path / "at.jsonl", [_row(words, "p_at")])
    done = run_bt(
        "base",
        "--cohort",
        at,
        "--model",
        tiny_model_dir,
        "--runs-dir",
        tmp_path / "runs",
        "--run",
        "at",
        "--max-tokens",
        "2",
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "runs" / "at" / "store.sqlite").is_file()
    _, refused = refused_over  # the prompt one token longer (`refused_over`)
    # exit 2 and one error line, no traceback (bt base announces the run and starts its
    # progress display on stderr first: see test_refused_prompt_writes_nothing)
    assert refused.returncode == 2 and "Traceback" not in refused.stderr + refused.stdout
    errors = [x for x in refused.stderr.splitlines() if x.startswith("bt: error:")]
    assert errors == [
        f"bt: error: problem p_over: prompt has {LIMIT + 1:,} tokens, over the "
        f"--max-prompt-tokens limit of {LIMIT:,}"
    ]


def test_refused_prompt_writes_nothing(refused_over):
    runs, refused = refused_over
    assert_one_line_error(refused, 2, "p_over", f"over the --max-prompt-tokens limit of {LIMIT:,}")
    assert not (runs / "over").exists()


def test_max_prompt_tokens_option_at_the_boundary(tmp_path, tiny_model_dir, tiny_model):
    """`bt base --max-prompt-tokens N`: a prompt of exactly N tokens runs, N - 1 is refused in
    one line before anything is written."""
    n = _prompt_len(tiny_model, 3)
    cohort = _cohort(tmp_path / "c.jsonl", [_row(3, "p3")])
    args = (
        "base",
        "--cohort",
        cohort,
        "--model",
        tiny_model_dir,
        "--runs-dir",
        tmp_path / "runs",
        "--max-tokens",
        "2",
    )
    refused = run_bt(*args, "--run", "short", "--max-prompt-tokens", str(n - 1))
    assert_one_line_error(refused, 2, "p3", f"over the --max-prompt-tokens limit of {n - 1:,}")
    assert not (tmp_path / "runs" / "short").exists()
    done = run_bt(*args, "--run", "exact", "--max-prompt-tokens", str(n))
    assert done.returncode == 0, done.stderr


# ---------------------------------------------------------------------------------------------
# the 16,384 total cap


def test_check_budget_at_the_total_cap_and_one_over():
    exact = CAP - B - ANSWER  # 14,848: prefix + 1,024 + 512 = 16,384
    assert check_budget(exact, B, DEFAULT)
    assert not check_budget(exact + 1, B, DEFAULT)
    # B is the other side of the same sum
    assert check_budget(exact, B, DEFAULT) and not check_budget(exact, B + 1, DEFAULT)
    # restarts (empty prefix): C + 512 ≤ 16,384
    assert check_budget(0, CAP - ANSWER, DEFAULT) and not check_budget(0, CAP - ANSWER + 1, DEFAULT)
    # the answer reserve alone never fits: available must exceed the reserve (3.3 step 1)
    assert not check_budget(CAP - ANSWER, 0, DEFAULT)
    # the cap is the protocol's: a smaller cap moves the boundary with it
    small = DEFAULT.with_overrides(total_cap=4096)
    assert check_budget(4096 - B - ANSWER, B, small)
    assert not check_budget(4096 - B - ANSWER + 1, B, small)


def _base(thinking: int) -> dict:
    """A base trace: one special token (the open marker), `thinking` thinking tokens, one
    special token; anchor t is cut after token t (cut = t + 1)."""
    segs = np.array([1] + [0] * thinking + [1], dtype=np.uint8)
    return {"segments": segs, "token_ids": list(range(len(segs)))}


@pytest.mark.parametrize(
    "last, kept",
    [
        (CAP - B - ANSWER - 1, True),  # cut = 14,848: exact
        (CAP - B - ANSWER, False),
    ],
)  # cut = 14,849: one over
def test_plan_cell_keeps_the_anchor_that_fits_exactly(last, kept):
    proto = DEFAULT.with_overrides(anchors=(64, 8192, last))
    plan = plan_cell("m:p", {"id": "p"}, [1, 2, 3], _base(CAP), proto)
    assert plan.cut(last) == last + 1
    assert plan.grid == ([64, 8192, last] if kept else [64, 8192])


def test_study_grid_never_reaches_the_cap():
    # with B = 1,024 every canonical anchor fits: 8,192 + 1 + 1,024 + 512 < 16,384
    plan = plan_cell("m:p", {"id": "p"}, [1], _base(CAP), DEFAULT)
    assert plan.grid == list(DEFAULT.anchors)


@pytest.fixture(scope="module")
def qwen_tiny(tiny_model_dir):
    from breakthrough.models.loading import load_model

    return load_model(str(tiny_model_dir), family="qwen")


def _branch_at_cap(loaded, extra_cap: int = 0):
    """One greedy probe branch whose prefix + B + answer reserve is exactly a small total cap,
    on the tiny model (random weights: it does not close its reasoning by itself)."""
    from breakthrough.engine import EngineSpec, make_engine

    b, answer, cut = 8, 4, 20
    trace = list(range(100, 160))
    proto = DEFAULT.with_overrides(
        budget=b,
        answer_budget=answer,
        total_cap=cut + b + answer + extra_cap,
        sampling=Sampling(temperature=0.0),
    )
    engine = make_engine(EngineSpec(backend="mlx-fresh", batch_size=1), loaded)
    runner = BranchRunner(engine, loaded, [1, 2, 3], trace, proto)
    (res,) = runner.run([Branch("probe:20:0", "probe", 20, b, 0, 7, cut)])
    return proto, res


def test_branch_exactly_at_the_cap_without_forced_tokens(tiny_model):
    # the plain family inserts nothing: prefix + B + reserve is the whole cap
    proto, res = _branch_at_cap(tiny_model)
    assert not res.extra["forced_close"]
    assert (
        len(res.tokens)
        == res.branch.cut + res.extra["reasoning_tokens"] + res.extra["answer_tokens"]
        <= proto.total_cap
    )


def test_a_forced_close_needs_room_within_the_cap(qwen_tiny):
    """At prefix + B + reserve = cap there is no room for the forced-close tokens: the branch is
    refused up front (never a short answer window mid-run), and one token of room per forced
    id makes it fit with the full answer window."""
    from breakthrough.pipeline.branches import close_tokens

    forced = len(close_tokens(qwen_tiny)[1])
    assert forced > 0
    with pytest.raises(BtError, match="leaves no room"):
        _branch_at_cap(qwen_tiny)
    proto, res = _branch_at_cap(qwen_tiny, extra_cap=forced)
    assert res.extra["forced_close"] and res.extra["answer_tokens"] == proto.answer_budget
    assert len(res.tokens) <= proto.total_cap


def test_the_grid_stops_where_a_forced_close_would_not_fit():
    exact = CAP - B - ANSWER  # the last anchor's cut fits exactly without forced tokens
    assert check_budget(exact, B, DEFAULT) and not check_budget(exact, B, DEFAULT, forced=3)
    assert check_budget(exact - 3, B, DEFAULT, forced=3)
