"""Every generation option that changes the engine's path, on every model shape bt ships or
rehearses (issue 40, "every option x every supported model shape").

Shapes: the offline default (SmolLM2-135M, head_dim 64), the tiny float32 llama, the hub-shaped
4-bit gemma4 / ministral3 / qwen3 checkpoints (tests/models/hub_checkpoints.py) and the
geometry model (Qwen3-4B's KV cache, head_dim 128; breakthrough/models/offline.py).

Options: `--kv-bits 8|4`, a `--memory-gb` small enough that rows share their cell's prefix,
`--batch-size 1`, `--instrument`, `--add-budget` and the HTTP backend against `bt serve`. Each
continues a copy of one base run per shape, in-process through the pipeline (`continue_run`,
`add_budget_run`, `pipeline.trajectories.generate`), and is compared with the default path's
run: the token ids of every sample are equal wherever the option must not change them (all but
`--kv-bits`, which changes the model's distribution: there it runs, commits samples, and a
plain rerun of the run works, or a model whose head dimension it cannot quantize is refused in
one line with nothing recorded). One cell goes through the installed `bt`
(`test_one_cell_through_the_installed_bt`).

Sizes are tiny (one arith problem, a 12-token base trace, B = 4 + 4 answer tokens, anchors 4
and 8, restarts at 4 and 8, two samples) so the engine's paths, not its speed, are exercised."""

from __future__ import annotations

import shutil
import sqlite3
from pathlib import Path

import pytest
from bt_cli import run_bt, snapshot
from continue_fixture import store_probes
from engine.serve_procs import bt_serve

from breakthrough.engine import EngineSpec
from breakthrough.engine.prefix_cache import cache_bytes
from breakthrough.errors import BtError
from breakthrough.pipeline.base import BaseRun
from breakthrough.pipeline.budget_arm import add_budget_run
from breakthrough.pipeline.cell_loop import ContinueOptions, continue_run, run_kv_bits
from breakthrough.pipeline.trajectories import base_cells, generate
from breakthrough.protocol import DEFAULT
from breakthrough.store import RunStore
from breakthrough.tasks.cohorts import load_cohort

SHAPES = ["offline", "tiny", "gemma4-e4b", "ministral3-3b", "qwen3-4b", "geometry"]
OPTIONS = ["kv-bits 8", "kv-bits 4", "memory", "batch-size 1", "instrument", "add-budget"]
PROTOCOL = DEFAULT.with_overrides(
    base_max_tokens=12,
    budget=4,
    answer_budget=4,
    samples=2,
    restart_samples=2,
    topup_samples=4,
    anchors=(4, 8),
    restart_budgets=(4, 8),
)
BATCH = 8
ARM_BUDGET = 8

pytestmark = pytest.mark.model


@pytest.fixture(scope="module")
def shapes(request, tmp_path_factory, smollm2_tokenizer):
    """shape -> (LoadedModel, what `bt serve --model` takes, extra environment for it), built
    on first use from the suite's own fixtures."""
    from models.tiny import write_geometry_model

    from breakthrough.models.loading import load_model

    built: dict = {}

    def get(name: str):
        if name not in built:
            if name == "offline":
                built[name] = (request.getfixturevalue("offline_model"), "smollm2-135m", {})
            elif name == "tiny":
                model_dir = request.getfixturevalue("tiny_model_dir")
                built[name] = (request.getfixturevalue("tiny_model"), str(model_dir), {})
            elif name == "geometry":
                folder = write_geometry_model(
                    tmp_path_factory.mktemp("geometry") / "qwen3-4b-geometry",
                    "qwen3-4b",
                    smollm2_tokenizer,
                    heads=8,
                )
                built[name] = (load_model(str(folder)), str(folder), {})
            else:
                home = request.getfixturevalue("hub_home")
                loaded = request.getfixturevalue("hub_models")[name]
                built[name] = (loaded, name, {"HF_HOME": str(home)})
        return built[name]

    return get


def _tokens(run: Path) -> dict[tuple, bytes]:
    """(cell, kind, anchor, budget, branch) -> token ids (bytes) of every sample of `run`."""
    conn = sqlite3.connect(run / "store.sqlite")
    try:
        return {
            tuple(key): bytes(tok)
            for *key, tok in conn.execute(
                "SELECT cell_id, kind, anchor, budget, branch, token_ids FROM samples"
            )
        }
    finally:
        conn.close()


def _options(**kwargs) -> ContinueOptions:
    engine = kwargs.pop("engine", EngineSpec(batch_size=BATCH))
    return ContinueOptions(protocol=PROTOCOL, topup=(), engine=engine, **kwargs)


@pytest.fixture(scope="module")
def runs(shapes, tmp_path_factory):
    """shape -> (base run, the default path's continued run, its tokens), made once."""
    made: dict = {}

    def get(name: str):
        if name not in made:
            loaded = shapes(name)[0]
            root = tmp_path_factory.mktemp(f"matrix-{name}")
            base = root / "base"
            _base(loaded, base, EngineSpec(batch_size=BATCH))
            default = root / "default"
            shutil.copytree(base, default)
            continue_run(default, loaded, _options())
            tokens = _tokens(default)
            assert {k[1] for k in tokens} == {"base", "probe", "restart"}, tokens.keys()
            made[name] = (base, default, tokens)
        return made[name]

    return get


def _base(loaded, run: Path, engine: EngineSpec) -> None:
    """`bt base --cohort arith --limit 1 --max-tokens 12` into `run`, in-process."""
    rows = load_cohort("arith")[:1]
    job = BaseRun(
        name=str(loaded.alias),
        run_dir=run,
        rows=rows,
        cohort="arith",
        digest="matrix",
        protocol=PROTOCOL,
        engine=engine,
        hidden_stride=0,
        lock_wait=0.0,
    )
    generate(job, loaded, base_cells(loaded, rows, PROTOCOL, "plain"))


def _copy(base: Path, dst: Path) -> Path:
    shutil.copytree(base, dst)
    return dst


def _kv_bits(loaded, run: Path, bits: int, default: dict) -> None:
    """--kv-bits changes tokens: it runs and commits every sample the protocol asks for, and a
    plain rerun (the run's own setting) has nothing left to do; or the model's head dimension
    cannot be quantized: refused in one line, nothing recorded, and the plain path still runs."""
    before = snapshot(run)
    try:
        continue_run(run, loaded, _options(kv_bits=bits))
    except BtError as exc:
        assert "--kv-bits" in str(exc) and "head dimension" in str(exc), exc
        assert "\n" not in str(exc)
        assert snapshot(run) == before
        continue_run(run, loaded, _options())  # the plain path on the same run
        assert _tokens(run) == default
        return  # refused as it should be (the tiny llama's and Ministral-3's head dimensions)
    got = _tokens(run)
    # the grid's probes as the default path; restarts as its own outcomes owe (they may differ)
    grid = {k for k in default if k[1] == "probe" and k[4] < PROTOCOL.samples}
    assert grid <= got.keys() and any(k[1] == "restart" for k in got), got.keys()
    with RunStore(run, readonly=True) as store:
        assert store.manifest()["continuation"]["kv_bits"] == bits
    with RunStore(run, readonly=True) as store:  # a plain `bt continue`: the run's own setting
        own = run_kv_bits(store.manifest(), None, run)
    assert own == bits
    again = continue_run(run, loaded, _options(kv_bits=own))
    assert again.generated_tokens == 0 and _tokens(run) == got


def _memory_budget(loaded, run: Path) -> int:
    """A --memory-gb under `BATCH` rows' own copies of the longest row (so rows share their
    cell's prefix) that still holds the prefix and a few rows."""
    with RunStore(run, readonly=True) as store:
        ((cell, trace),) = [(t["cell_id"], t["token_ids"]) for t in store.base_traces()]
        _, prompt = store.cell_prompt(cell)
    longest = len(prompt) + len(trace) + PROTOCOL.budget + PROTOCOL.answer_budget + 16
    return int(cache_bytes(loaded.model).row(longest) * BATCH)


# Cells that failed when the matrix was written and are to pass (none now; an entry makes the
# cell a strict xfail with its reason: quantized KV on Gemma-4's KV-sharing layers, and bt serve
# of Gemma-4 / Ministral-3 from its generation thread, were the first two, both fixed in engine/).
ENGINE_BUGS: dict[tuple[str, str], str] = {}
SERVE_BUGS: dict[str, str] = {}


def _cases(options, bugs) -> list:
    return [
        pytest.param(
            shape,
            option,
            marks=(
                [pytest.mark.xfail(strict=True, reason=bugs[shape, option])]
                if (shape, option) in bugs
                else []
            )
            # SmolLM2-135M decodes at CPU speed: its cells take ~60 s of the matrix's ~90
            + ([pytest.mark.heavy] if shape == "offline" else []),
            id=f"{shape}-{option}",
        )
        for shape in SHAPES
        for option in options
    ]


@pytest.mark.parametrize(("shape", "option"), _cases(OPTIONS, ENGINE_BUGS))
def test_option_on_shape(shapes, runs, tmp_path, shape, option) -> None:
    loaded = shapes(shape)[0]
    base, _, default = runs(shape)
    run = _copy(base, tmp_path / "run")
    if option.startswith("kv-bits"):
        _kv_bits(loaded, run, int(option.split()[1]), default)
        return
    if option == "add-budget":
        _add_budget(loaded, run, default)
        return
    engines: list = []
    opts = {
        "memory": _options(
            engine=EngineSpec(batch_size=BATCH, memory_budget_bytes=_memory_budget(loaded, run))
        ),
        "batch-size 1": _options(engine=EngineSpec(batch_size=1)),
        "instrument": _options(instrument=True),
    }[option]
    continue_run(run, loaded, opts, on_start=lambda totals, engine: engines.append(engine))
    assert _tokens(run) == default
    (engine,) = engines
    if option == "memory":
        assert engine.share_prefixes and engine.memory_budget_bytes, "rows did not share"
    if option == "instrument":
        with RunStore(run, readonly=True) as store:
            n = store.conn.execute(
                "SELECT count(*) FROM signals JOIN samples USING(sample_id) "
                "WHERE kind IN ('probe', 'restart')"
            ).fetchone()[0]
        assert n == sum(k[1] in ("probe", "restart") for k in default)


def _add_budget(loaded, run: Path, default: dict) -> None:
    """--add-budget: graded probes at B with a T_F event at anchor 8, stable at 12 (the primary
    protocol's instant rule moved below 8 tokens, so the event is no instant one) make the
    trajectory an A2 target; the arm re-probes it at B2 on the engine, leaves every row of the
    run as it was, and a second call has nothing to do. Its tokens equal the arm's on a batch of
    one (the row-alone path)."""
    store_probes(run, {4: False, 8: True, 12: True}, budget=PROTOCOL.budget)
    with RunStore(run) as store:  # the protocol a continuation records, as bt continue does
        # an event at 8 is "instant" (<= 16 tokens) by the study's rule: the rule moved below it
        primary = PROTOCOL.with_overrides(anchors=(4, 8, 12), instant_max_upper=2)
        store.update_manifest({"protocol": primary.to_dict()})
    before = _tokens(run)
    alone = _copy(run, run.parent / "alone")
    rep = add_budget_run(run, loaded, ARM_BUDGET, EngineSpec(batch_size=BATCH))
    got = _tokens(run)
    arm = {k: v for k, v in got.items() if k not in before}
    assert arm and {k[1:4:2] for k in arm} == {("probe", ARM_BUDGET)}, (rep.notes, rep)
    assert all(got[k] == v for k, v in before.items())
    assert rep.generated_tokens > 0
    again = add_budget_run(run, loaded, ARM_BUDGET, EngineSpec(batch_size=BATCH))
    assert again.generated_tokens == 0 and _tokens(run) == got
    add_budget_run(alone, loaded, ARM_BUDGET, EngineSpec(batch_size=1))
    assert _tokens(alone) == got


@pytest.mark.heavy
@pytest.mark.parametrize(
    ("shape", "option"), _cases(["http"], {(k, "http"): v for k, v in SERVE_BUGS.items()})
)
def test_http_backend_on_shape(shapes, runs, tmp_path, shape, option) -> None:
    """The HTTP backend against `bt serve` of the same model: a run made and continued through
    it holds the tokens of the in-process default path."""
    loaded, serve_model, env = shapes(shape)
    _, _, default = runs(shape)
    with bt_serve(Path(serve_model), batch_size=BATCH, env=env) as (server,):
        spec = EngineSpec(backend="vllm", endpoints=(server.url,), max_inflight=BATCH)
        run = tmp_path / "http"
        _base(loaded, run, spec)
        continue_run(run, loaded, _options(engine=spec))
    assert _tokens(run) == default


def test_one_cell_through_the_installed_bt(shapes, runs, tmp_path) -> None:
    """`bt continue --memory-gb G` (rows sharing their prefix) on the tiny llama, through the
    installed console script: the tokens of the in-process default path."""
    loaded = shapes("tiny")[0]
    base, _, default = runs("tiny")
    run = _copy(base, tmp_path / "run")
    gb = f"{_memory_budget(loaded, run) / 2**30:.9f}"
    proc = run_bt(
        "continue", run, "--budget", "4", "--answer-budget", "4", "--samples", "2",
        "--anchors", "4,8", "--restarts", "4,8", "--topup", "none", "--batch-size", str(BATCH),
        "--memory-gb", gb,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert _tokens(run) == default
