"""Continuations on the study's architectures equal the fresh-prefill reference procedure, and
`bt base` -> `bt continue` -> `bt classify` runs end to end on each (issue 14).

Gemma-4's sliding-window layers give real `RotatingKVCache` layers (window 32 in the tiny model,
so every cut past 32 tokens is served from a rotated window) and Qwen3.5's gated-delta layers a
recurrent `ArraysCache`: neither can be cut back, so `PrefixCache` serves them from snapshots of
those layers taken during the one prefill, with no monkeypatch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from fresh_references import greedy_references
from models.architectures import ARCHITECTURES
from typer.testing import CliRunner

from breakthrough.cli import app
from breakthrough.engine.contract import GenRequest, RowShape, SharedPrefix
from breakthrough.engine.mlx_backend import MlxEngine
from breakthrough.engine.prefix_cache import PrefixCache, cache_bytes
from breakthrough.errors import BtError
from breakthrough.models.families import build_prompt_ids
from breakthrough.pipeline.branches import Branch, BranchRunner, close_tokens
from breakthrough.protocol import DEFAULT, Sampling
from breakthrough.store import RunStore

NAMES = list(ARCHITECTURES)


@pytest.fixture(scope="module")
def traces(architecture_models):
    """name -> (loaded, prompt ids, a 160-token greedy base trace)."""
    out = {}

    def get(name):
        if name not in out:
            loaded = architecture_models[name]
            engine = MlxEngine.from_loaded(loaded, batch_size=1)
            prompt = build_prompt_ids(loaded.tokenizer, loaded.family, "What is 2+2?")
            (base,) = engine.generate([GenRequest(key="b", prompt=prompt, max_tokens=160, seed=11)])
            out[name] = (loaded, prompt, base.tokens)
        return out[name]

    return get


@pytest.mark.parametrize("temperature", [0.0, 0.6])
@pytest.mark.parametrize("name", NAMES)
def test_continuations_equal_fresh_prefill(traces, name, temperature) -> None:
    loaded, prompt, trace = traces(name)
    assert len(trace) == 160
    protocol = DEFAULT.with_overrides(
        budget=10, answer_budget=5, sampling=Sampling(temperature=temperature)
    )
    cuts = (40, 97, 160)  # snapshot cuts, all past Gemma's 32-token window
    engine = MlxEngine.from_loaded(loaded, batch_size=8)
    fresh = MlxEngine.from_loaded(loaded, batch_size=1, reuse_prefixes=False)
    shared = SharedPrefix(
        "cell", tuple(prompt + trace), starts=(len(prompt), *(len(prompt) + c for c in cuts))
    )
    runner = BranchRunner(engine, loaded, prompt, trace, protocol, shared)
    # 120 is no snapshot (extended from the one at 97); cut 0 is a restart (empty prefix)
    branches = [
        Branch(f"k{c}:{i}", "restart" if c == 0 else "probe", c or -1, 10, i, 1000 + 7 * c + i, c)
        for c in (0, *cuts, 120)
        for i in range(2)
    ]
    got = runner.run(branches)
    reference = greedy_references(fresh, loaded, prompt, trace, protocol)  # reference_branch
    for res in got:
        b = res.branch
        want = reference(b.cut, 10, b.seed)
        assert res.tokens == want, b.key
        assert res.extra["forced_close"] == (res.extra["reasoning_finish"] != "stop_sequence")
    ((_, pc),) = engine._prefixes.values()
    untrimmable = name in ("gemma4_text", "qwen3_5")
    assert pc.plain is (not untrimmable)
    # one prefill of prompt + trace (the last snapshot is the longest cut, minus the fed token)
    # plus the 120 - 97 tokens that extend a snapshot, per request
    extra = 2 * (120 - 97) if untrimmable else 0  # each of the 2 branches at 120
    want = len(prompt) + 160 - 1 + extra if untrimmable else len(prompt) + 160
    assert pc.prefill_tokens == want, (pc.prefill_tokens, want, sorted(pc.snapshots))


def test_forced_close_ids_end_the_reasoning_on_each_family(architecture_models) -> None:
    for name in NAMES:
        loaded = architecture_models[name]
        close, forced, eos = close_tokens(loaded)
        assert len(close) == 1 and close[0] in forced  # the marker is one special token
        assert not set(forced) & eos


def test_snapshots_hold_only_the_untrimmable_layers(traces) -> None:
    """Snapshot memory: the plain layers are held once (full length); each snapshot copies only
    the sliding-window layers (bounded by window + one prefill chunk) or the recurrent state."""
    for name in ("gemma4_text", "qwen3_5"):
        loaded, prompt, trace = traces(name)
        seq = prompt + trace
        b = cache_bytes(loaded.model)
        sizes = {}
        for cuts in ((40,), (40, 80, 120, 160)):
            pc = PrefixCache(loaded.model, seq, snapshot_at=[len(prompt) + c - 1 for c in cuts])
            pc.state(len(prompt) + 40)
            assert all(
                s[i] is None
                for s in pc.snapshots.values()
                for i, p in enumerate(pc._plain_mask)
                if p
            )
            assert 0 < pc.nbytes <= b.prefix_cache(len(seq), len(cuts))
            sizes[len(cuts)] = pc.nbytes
        per_snapshot = (sizes[4] - sizes[1]) / 3
        if name == "gemma4_text":
            assert b.window == 32 and b.bounded_per_token > 0 and b.plain_per_token > 0
            # a rotated window copy, not a copy of the whole prefix
            assert per_snapshot < b.bounded_per_token * (32 + 512) + 1
        else:
            assert b.fixed > 0 and b.bounded_per_token == 0
            assert per_snapshot == pytest.approx(b.fixed, rel=0.5)


def test_capacity_holds_a_shared_prefix_once(traces) -> None:
    """Issue 28: rows hold their own tokens only (allocated once, no growth transient); the
    cell's prefix is held once, by its PrefixCache, whatever the branches sharing it."""
    loaded, prompt, trace = traces("gemma4_text")
    b = cache_bytes(loaded.model)
    shared, row = 16384, 16384 + 512 + 16
    per = b.prefix_cache(shared, len(DEFAULT.anchors) + 1)
    per_row = b.own_row(row - shared) + b.step_transient(1, row)
    assert b.own_row(row - shared) < b.row(row) / 4  # a probe row no longer pays for its prefix
    budget = int(4 * per + 3 * per_row) + 1  # two prefixes take at most half of it
    engine = MlxEngine.from_loaded(
        loaded, batch_size=64, memory_budget_bytes=budget, shared_prefixes=2
    )
    plan = engine.plan(RowShape(row, shared_tokens=shared))
    assert plan.probe_rows == min(64, int((budget - 2 * per) // per_row))
    assert plan.prefix_slots == 2
    fresh = MlxEngine.from_loaded(
        loaded, batch_size=64, memory_budget_bytes=budget, shared_prefixes=2, reuse_prefixes=False
    )
    whole = b.own_row(row) + b.step_transient(1, row)
    assert fresh.plan(RowShape(row, shared)).probe_rows == int(budget // whole)  # nothing shared
    tiny = MlxEngine.from_loaded(loaded, batch_size=64, memory_budget_bytes=int(per))
    with pytest.raises(BtError, match="--memory-gb"):
        tiny.plan(RowShape(row, shared_tokens=shared))


def test_a_tight_budget_keeps_fewer_prefixes_before_fewer_rows(traces) -> None:
    """Issue 22: the engine keeps 8 shared prefixes (the scheduler sorts that many cells' probes
    by length together), but never lets them take more than half of --memory-gb: it keeps fewer
    before it runs fewer rows; issue 28: down to one, so that a budget holding one prefix and one
    row is never refused."""
    loaded, _, _ = traces("gemma4_text")
    b = cache_bytes(loaded.model)
    shared, row = 16384, 16384 + 512 + 16
    per = b.prefix_cache(shared, len(DEFAULT.anchors) + 1)
    per_row = b.own_row(row - shared) + b.step_transient(1, row)
    budget = int(10 * per)  # 8 prefixes would take 80 % of it; 5 take half
    engine = MlxEngine.from_loaded(loaded, batch_size=64, memory_budget_bytes=budget)
    shape = RowShape(row, shared_tokens=shared)
    plan = engine.plan(shape)
    assert plan.prefix_slots == 5
    assert plan.probe_rows == min(64, int((budget - 5 * per) // per_row))
    roomy = MlxEngine.from_loaded(loaded, batch_size=64, memory_budget_bytes=int(100 * per))
    assert roomy.plan(shape).prefix_slots == 8
    tight = MlxEngine.from_loaded(loaded, batch_size=64, memory_budget_bytes=int(per + per_row) + 1)
    plan = tight.plan(shape)
    assert plan.probe_rows == 1 and plan.prefix_slots == 1
    assert MlxEngine.from_loaded(loaded, reuse_prefixes=False).plan(shape).prefix_slots is None


CONTINUE = [
    "--anchors",
    "4,8,16,40",
    "--budget",
    "4",
    "--answer-budget",
    "4",
    "--restarts",
    "4,8",
    "--samples",
    "2",
    "--batch-size",
    "4",
]


@pytest.mark.parametrize("name", NAMES)
def test_base_continue_classify_end_to_end(tmp_path: Path, architecture_dirs, name) -> None:
    runs = tmp_path / "runs"
    res = CliRunner().invoke(
        app,
        [
            "base",
            "--cohort",
            "demo",
            "--limit",
            "1",
            "--model",
            str(architecture_dirs[name]),
            "--runs-dir",
            str(runs),
            "--run",
            "r",
            "--max-tokens",
            "64",
            "--batch-size",
            "2",
        ],
    )
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["continue", str(runs / "r"), *CONTINUE])
    assert res.exit_code == 0, res.output
    res = CliRunner().invoke(app, ["classify", str(runs / "r")])
    assert res.exit_code == 0, res.output
    with RunStore(runs / "r") as s:
        df = s.samples_frame()
        man = s.manifest()
    assert set(df["kind"]) == {"base", "probe", "restart"}
    probes = df[df["kind"] == "probe"]
    assert sorted(set(probes["anchor"])) == [4, 8, 16, 40]
    fam = ARCHITECTURES[name].family
    assert fam in str(man)
    base = df[df["kind"] == "base"].iloc[0]
    assert len(base.token_ids) == 64 and np.all(np.isin(base.segments, [0, 1, 2, 3]))
    assert (runs / "r" / "classify" / "index.html").is_file()


@pytest.mark.parametrize("name", ["gemma4_text", "qwen3_5"])
def test_answer_phase_continues_an_untrimmable_live_state(traces, name) -> None:
    """A reasoning phase that stops on its close sequence (natural close: the answer phase
    re-feeds the last token) or at EOS (the EOS is dropped) hands its live cache, with a rotated
    window or a recurrent state, to the answer phase; the tokens equal a fresh prefill."""
    loaded, prompt, trace = traces(name)
    ctx = prompt + trace[:97]
    fresh = MlxEngine.from_loaded(loaded, batch_size=1, reuse_prefixes=False)
    (free,) = fresh.generate([GenRequest(key="f", prompt=ctx, max_tokens=10, seed=3)])
    stop = free.tokens[4]
    n = free.tokens.index(stop) + 1
    close, forced, _ = close_tokens(loaded)
    engine = MlxEngine.from_loaded(loaded, batch_size=4)
    for case, answer in (
        ("natural", lambda toks: ctx + toks),
        ("eos", lambda toks: ctx + toks[:-1] + forced),
    ):
        (r,) = engine.generate(
            [
                GenRequest(
                    key=case,
                    prompt=ctx,
                    max_tokens=10,
                    seed=3,
                    stop_sequences=((stop,),),
                    keep_state=True,
                )
            ]
        )
        assert r.finish_reason == "stop_sequence" and r.tokens == free.tokens[:n]
        answer_prompt = answer(list(r.tokens))
        (a,) = engine.generate(
            [GenRequest(key=case, prompt=answer_prompt, max_tokens=6, seed=9, follows=case)]
        )
        (want,) = fresh.generate([GenRequest(key="w", prompt=answer_prompt, max_tokens=6, seed=9)])
        assert a.tokens == want.tokens, case


def test_total_cap_at_the_boundary() -> None:
    """Protocol 1.5 / 3.3 step 1: prefix + B + the full answer reserve may reach the 16,384
    total exactly; one token more is refused."""
    from breakthrough.pipeline.branches import check_budget

    p = DEFAULT
    assert p.total_cap == 16384 and p.answer_budget == 512
    for budget in (1024, 8192):
        exact = p.total_cap - p.answer_budget - budget
        assert check_budget(exact, budget, p)
        assert not check_budget(exact + 1, budget, p)


def test_a_memory_budget_below_one_row_is_refused(tmp_path: Path, architecture_dirs) -> None:
    """`bt continue --memory-gb` too small for one row plus the shared-prefix caches: one line
    naming the option, non-zero exit, no traceback, no sample written."""
    import subprocess
    import sys

    runs = tmp_path / "runs"
    res = CliRunner().invoke(
        app,
        [
            "base",
            "--cohort",
            "demo",
            "--limit",
            "1",
            "--model",
            str(architecture_dirs["gemma4_text"]),
            "--runs-dir",
            str(runs),
            "--run",
            "r",
            "--max-tokens",
            "48",
            "--batch-size",
            "1",
        ],
    )
    assert res.exit_code == 0, res.output
    bt = Path(sys.executable).with_name("bt")
    proc = subprocess.run(
        [str(bt), "continue", str(runs / "r"), *CONTINUE, "--memory-gb", "0.00001"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr + proc.stdout
    assert "--memory-gb 1e-05 cannot hold one row" in proc.stderr + proc.stdout
    with RunStore(runs / "r") as s:
        assert set(s.samples_frame(arrays=False)["kind"]) == {"base"}
