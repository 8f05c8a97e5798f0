"""`bt probe`: read trajectories (a bt run, or an external dump), teacher-force each through its
model for hidden states and the entropy / surprisal / top-1 probability streams (one forward),
run the probe dissection of `signals/probe.py` on both arms (hidden-state anchor vectors and the
stream summaries), write the table (CSV, parquet), a summary (JSON) and the pooled-vs-within
figure (PNG, one panel per arm).

Inputs, read and checked whole before any model is loaded or file written:
* a bt run directory: its graded base traces and `bt sample` attempts (token ids and the cell's
  prompt ids from the store), forced through the run's own model;
* a JSONL file, one object per line: problem_id, prompt, completion, correct (bool or 0/1);
* a math128-layout folder: one YAML file per problem (stem = problem id) with `prompt`,
  `samples` (list of completions) and `gt_answer` (reference = its last \\boxed{}), each sample
  graded with math-verify.
Dump text is tokenized with the model's tokenizer as protocol 9.8 does.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from breakthrough.errors import BtError
from breakthrough.outputs import make_folder, write_atomic, write_json
from breakthrough.schemas.signals import PROBE_TABLE
from breakthrough.schemas.write import write_csv, write_parquet
from breakthrough.signals import probe
from breakthrough.tasks.cohorts import jsonl_records

RUN_KINDS = ("base", "attempt")  # whole attempts at a problem (not probes or restarts)
OUTPUT_FILES = ("probe_table.csv", "probe_table.parquet", "probe_summary.json", "probe_figure.png")


@dataclass
class Trajectory:
    """One attempt: its problem, outcome, and either token ids (a run) or text (a dump)."""

    problem_id: str
    correct: bool
    prompt_ids: Sequence[int] | None = None
    generated_ids: Sequence[int] | None = None
    prompt: str | None = None
    completion: str | None = None


@dataclass
class Source:
    """What `bt probe` reads: trajectories, the model that forces them, the default output."""

    kind: str  # "run" | "jsonl" | "math128"
    trajectories: list[Trajectory]
    model: str
    family: str | None
    default_out: Path
    notes: list[str]


# --------------------------------------------------------------------------- reading


def read_source(path: Path, model: str | None) -> Source:
    """Recognise and read RUN|DUMP; every problem a user can cause is one BtError line."""
    if not path.exists():
        raise BtError(f"{path}: no such file or directory")
    from breakthrough.store import is_run_dir

    if is_run_dir(path):
        if model is not None:
            raise BtError("--model: a run is probed with the model that generated it; drop --model")
        return _read_run(path)
    from breakthrough.models.registry import OFFLINE_DEFAULT

    notes = [] if model else [f"no --model given: tokenizing and forcing with {OFFLINE_DEFAULT}"]
    name = model or OFFLINE_DEFAULT
    if path.is_file() and path.suffix == ".jsonl":
        return Source(
            "jsonl", _read_jsonl(path), name, None, path.with_name(path.stem + ".probe"), notes
        )
    if path.is_dir():
        yamls = sorted(p for p in path.iterdir() if p.suffix in (".yaml", ".yml"))
        if yamls:
            return Source(
                "math128",
                _read_math128(yamls),
                name,
                None,
                path.with_name(path.name + ".probe"),
                notes,
            )
        raise BtError(
            f"{path}: neither a run (no store.sqlite) nor a math128 dump (no .yaml files)"
        )
    raise BtError(f"{path}: expected a run directory, a .jsonl dump or a folder of .yaml files")


def _read_run(run_dir: Path) -> Source:
    from breakthrough.store import RunStore

    store = RunStore(run_dir, readonly=True)
    try:
        man = store.manifest()
        if "model_id" not in man:
            raise BtError(f"{run_dir}: the manifest names no model; run `bt base` first")
        frames = [store.samples_frame(kind=k) for k in RUN_KINDS]
        import pandas as pd

        df = pd.concat(frames, ignore_index=True)
        graded = df[df["correct"].notna()]
        notes = []
        if len(graded) < len(df):
            notes.append(f"{len(df) - len(graded)} ungraded samples left out (run `bt grade`)")
        prompts = {c: store.cell_prompt(c)[1] for c in graded["cell_id"].unique()}
    finally:
        store.close()
    trajs = [
        Trajectory(
            str(r.cell_id),
            bool(r.correct),
            prompts[r.cell_id].tolist(),
            np.asarray(r.token_ids).tolist(),
        )
        for r in graded.itertuples()
    ]
    return Source("run", trajs, man["model_id"], man.get("family"), run_dir / "probe", notes)


def _read_jsonl(path: Path) -> list[Trajectory]:
    out = []
    with open(path, encoding="utf-8") as fh:
        for i, _, obj in jsonl_records(fh, path):
            if not isinstance(obj, dict):
                raise BtError(f"{path}:{i}: expected a JSON object")
            for key, kinds in (
                ("problem_id", (str, int)),
                ("prompt", (str,)),
                ("completion", (str,)),
            ):
                if not isinstance(obj.get(key), kinds) or isinstance(obj.get(key), bool):
                    raise BtError(
                        f"{path}:{i}: field '{key}' missing or not a "
                        f"{' or '.join(k.__name__ for k in kinds)}"
                    )
            correct = obj.get("correct")
            if correct not in (True, False, 0, 1):
                raise BtError(
                    f"{path}:{i}: field 'correct' must be true/false or 0/1, got {correct!r}"
                )
            out.append(
                Trajectory(
                    str(obj["problem_id"]),
                    bool(correct),
                    prompt=obj["prompt"],
                    completion=obj["completion"],
                )
            )
    if not out:
        raise BtError(f"{path}: no trajectories")
    return out


def _read_math128(files: list[Path]) -> list[Trajectory]:
    import yaml

    from breakthrough.tasks.math.grader import MathGrader
    from breakthrough.tasks.math.source import last_boxed

    jobs: list[tuple[str, dict[str, Any], str | None]] = []
    meta: list[tuple[str, str, str]] = []
    for f in files:
        try:
            doc = yaml.safe_load(f.read_text(encoding="utf-8"))
        except yaml.YAMLError as exc:
            raise BtError(f"{f}: not YAML ({str(exc).splitlines()[0]})") from None
        if not isinstance(doc, dict):
            raise BtError(f"{f}: expected a mapping with prompt, samples, gt_answer")
        for key in ("prompt", "gt_answer"):
            if not isinstance(doc.get(key), str):
                raise BtError(f"{f}: field '{key}' missing or not a string")
        samples = doc.get("samples")
        if not isinstance(samples, list) or not all(isinstance(s, str) for s in samples):
            raise BtError(f"{f}: field 'samples' missing or not a list of strings")
        item = {"id": f.stem, "answer": last_boxed(doc["gt_answer"]) or doc["gt_answer"]}
        for s in samples:
            jobs.append((s, item, None))
            meta.append((f.stem, doc["prompt"], s))
    with MathGrader() as grader:
        grades = grader.grade_many(jobs)
    return [
        Trajectory(pid, bool(g.correct), prompt=p, completion=s)
        for (pid, p, s), g in zip(meta, grades, strict=True)
    ]


# --------------------------------------------------------------------------- running


@dataclass
class ProbeRun:
    """What `bt probe` produced: the table, its printed lines, the files, notes for stderr."""

    result: probe.ProbeTable
    out: Path
    files: list[Path]
    notes: list[str]
    n_trajectories: int
    model: str

    def lines(self) -> list[str]:
        r = self.result
        fid = (
            f"teacher-forcing fidelity: top-1 agreement {r.top1_mean:.3f} (p10 {r.top1_p10:.3f})"
            if math.isfinite(r.top1_mean)
            else "teacher-forcing fidelity: n/a"
        )
        return [
            f"{self.n_trajectories} trajectories, model {self.model}",
            fid,
            *probe.format_table(r.table),
        ]


def check_out(out: Path) -> None:
    """The output folder must be creatable and writable (checked before any work)."""
    if out.exists() and not out.is_dir():
        raise BtError(f"--out: {out} exists and is not a folder")
    parent = out if out.exists() else next((p for p in out.parents if p.exists()), Path("."))
    import os

    if not os.access(parent, os.W_OK):
        raise BtError(f"--out: {parent} is not writable")


def run_probe(
    path: Path,
    *,
    model: str | None = None,
    anchors: Sequence[int] = probe.DEFAULT_ANCHORS,
    max_tokens: int = 512,
    bootstrap: int = probe.N_BOOT,
    out: Path | None = None,
    progress: Callable[[str], None] | None = None,
) -> ProbeRun:
    """Read, check, force every trajectory, run the probe, write the outputs."""
    src = read_source(path, model)
    out = out or src.default_out
    check_out(out)
    if len({t.problem_id for t in src.trajectories}) < 2:
        raise BtError(f"{path}: the probe needs at least two problems (folds are by problem)")

    from breakthrough.models.hidden_states import teacher_force, tokenize_dump
    from breakthrough.models.loading import load_model

    loaded = load_model(src.model, family=src.family)
    vectors, streams, top1 = [], [], []
    for i, t in enumerate(src.trajectories):
        if t.prompt_ids is None:
            t.prompt_ids, t.generated_ids = tokenize_dump(
                loaded.tokenizer, t.prompt or "", t.completion or ""
            )
        assert t.generated_ids is not None  # ids come together: a run has both, a dump neither
        tf = teacher_force(loaded.model, t.prompt_ids, t.generated_ids, max_tokens)
        vectors.append(probe.anchor_vectors(tf.hidden, anchors))
        streams.append(
            probe.stream_summaries(tf.entropy, tf.surprisal, tf.top1_probability, anchors)
        )
        top1.append(tf.top1_agreement)
        if progress and (i + 1) % 50 == 0:
            progress(f"forced {i + 1}/{len(src.trajectories)} trajectories")
    data = probe.ProbeData.from_rows(
        [t.problem_id for t in src.trajectories],
        [t.correct for t in src.trajectories],
        vectors,
        anchors,
        top1,
        streams,
    )
    result = probe.probe_table(data, n_boot=bootstrap, progress=progress)
    files = _write(out, result, src, anchors, max_tokens, bootstrap)
    notes = list(src.notes)
    outcomes = [bool(t.correct) for t in src.trajectories]
    rarer = min(sum(outcomes), len(outcomes) - sum(outcomes))
    if rarer < probe.N_FOLDS:
        forms = ("success", "successes") if sum(outcomes) == rarer else ("failure", "failures")
        kind = forms[rarer != 1]
        notes.append(
            f"only {rarer} {kind} among "
            f"{len(outcomes)} trajectories (fewer than the {probe.N_FOLDS} folds): a fold "
            "whose training rows hold one class scores its rows with that class's rate, "
            "so the AUROCs say little"
        )
    return ProbeRun(result, out, files, notes, len(src.trajectories), src.model)


def _write(
    out: Path,
    result: probe.ProbeTable,
    src: Source,
    anchors: Sequence[int],
    max_tokens: int,
    bootstrap: int,
) -> list[Path]:
    make_folder(out)
    paths = [out / name for name in OUTPUT_FILES]
    write_csv(PROBE_TABLE, result.table, paths[0])
    write_parquet(PROBE_TABLE, result.table, paths[1])
    summary = {
        "source": src.kind,
        "model": src.model,
        "trajectories": len(src.trajectories),
        "anchors": list(map(int, anchors)),
        "max_tokens": max_tokens,
        "bootstrap": bootstrap,
        "seeds": {"folds_pca_pooled": probe.PROBE_SEED, "within_bootstrap": probe.WITHIN_BOOT_SEED},
        "pooled_per_problem": probe.POOLED_PER_PROBLEM,
        "mid_band": list(probe.MID_BAND),
        "stream_features": list(probe.STREAM_SUMMARIES),
        "top1_agreement_mean": _finite(result.top1_mean),
        "top1_agreement_p10": _finite(result.top1_p10),
        "table": json.loads(result.table.to_json(orient="records")),
    }
    write_json(paths[2], summary)
    _figure(result.table, paths[3])
    return paths


def _finite(x: float) -> float | None:
    return float(x) if math.isfinite(x) else None


ARM_TITLES = {"hidden": "Hidden-state probe", "stream": "Stream-summary probe"}


def _figure(table, path: Path) -> None:
    """Pooled vs within-problem AUROC over the anchor t, with bootstrap bands and the LOO line:
    one panel per probe arm in the table (hidden, then stream), on a shared AUROC axis so the
    arms compare at a glance."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    arms = [a for a in probe.ARMS if (table["arm"] == a).any()] or ["hidden"]
    fig, axes = plt.subplots(
        1, len(arms), figsize=(6.4 * len(arms), 4.0), sharey=True, squeeze=False
    )
    loo = table[table["score"] == "loo"]
    for arm, ax in zip(arms, axes[0], strict=True):
        rows = table[(table["score"] == "probe") & (table["arm"] == arm)]
        t = rows["t"].astype(float).to_numpy()
        for name, label, style in (
            ("pooled", "pooled", "-"),
            ("within_failure_weighted", "within, failure-weighted", "-"),
            ("within_pair_weighted", "within, pair-weighted", "--"),
        ):
            if len(rows):
                (line,) = ax.plot(t, rows[name].astype(float), style, marker="o", label=label)
                ax.fill_between(
                    t,
                    rows[f"{name}_lo"].astype(float),
                    rows[f"{name}_hi"].astype(float),
                    color=line.get_color(),
                    alpha=0.15,
                )
        if len(loo) and math.isfinite(loo["pooled"].iloc[0]):
            ax.axhline(
                loo["pooled"].iloc[0], color="grey", linestyle=":", label="LOO pass rate, pooled"
            )
        ax.axhline(0.5, color="black", linewidth=0.6)
        if len(rows):
            ax.set_xscale("log", base=2)
            ax.set_xticks(t, [str(int(v)) for v in t])
            ax.minorticks_off()
        ax.set_xlabel("anchor t (generated tokens)")
        ax.set_ylim(0, 1)
        ax.set_title(f"{ARM_TITLES[arm]}: pooled vs within-problem")
        if ax.get_legend_handles_labels()[0]:  # nothing drawn (no defined AUROC): no legend
            ax.legend(fontsize=8, loc="lower left")
        else:
            ax.text(
                0.5,
                0.5,
                "no defined AUROC (one outcome class)",
                ha="center",
                va="center",
                transform=ax.transAxes,
                fontsize=9,
                color="grey",
            )
    axes[0][0].set_ylabel("AUROC")
    fig.tight_layout()
    try:
        write_atomic(path, lambda tmp: fig.savefig(tmp, format="png", dpi=120))
    finally:
        plt.close(fig)
