"""Every table the README's pipeline writes, from real runs on the tiny model, matches its
declaration (breakthrough/schemas) as a researcher reads it back: the parquet file's columns in
declared order with the declared arrow types (no column typed `null` because a small run left
it empty), the CSV's header the same columns, headlines.json the declared keys. The runs are
the report tests' shared fixtures (classified, a second probe arm and the study page, signals
and a confirm sweep), one run never continued (the `unfinished` table) and `bt export`."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from bt_cli import bt_in_process
from schema_files import assert_file_matches

from breakthrough.report.classify_outputs import TABLES as CLASSIFY_TABLES
from breakthrough.schemas import classify as C
from breakthrough.schemas import export as E
from breakthrough.schemas import signals as S
from breakthrough.schemas import study as ST
from breakthrough.schemas.check import check_document
from breakthrough.schemas.columns import Table
from breakthrough.schemas.registry import TABLES


def _classify_files(folder: Path) -> dict[Path, Table]:
    out = {p: CLASSIFY_TABLES[p.stem] for p in folder.glob("*.parquet")}
    out |= {p: CLASSIFY_TABLES[p.stem] for p in folder.glob("*.csv") if p.stem != "plan"}
    return out | {folder / "plan.csv": C.PLAN}


@pytest.fixture(scope="module")
def written(classified, studied, unfit_study, tmp_path_factory, tiny_model_dir) -> dict:
    """Every table file of the fixtures' runs → its declaration."""
    from continue_fixture import make_run

    files: dict[Path, Table] = {}
    files |= _classify_files(classified[1])
    files |= _classify_files(studied[1] / "classify")  # a second arm: arms, a2
    for study in (studied[1], unfit_study[1]):
        files |= {p: ST.BY_KEY[p.stem] for p in (study / "tables").iterdir()}
    run = unfit_study[0]
    files[run / "signals.parquet"] = S.SIGNALS
    for p in run.rglob("confirm.csv"):
        files[p] = S.CONFIRM
    files |= {p: S.SWEEP for p in run.rglob("sweep.csv")}
    out = tmp_path_factory.mktemp("export")
    for fmt in ("parquet", "csv"):
        bt_in_process("export", classified[0], "-f", fmt, "-o", out / fmt)
        files |= {out / fmt / f"samples.{fmt}": E.SAMPLES, out / fmt / f"cells.{fmt}": E.CELLS}
    base_only = tmp_path_factory.mktemp("base-only") / "fx"
    make_run(base_only, tiny_model_dir, {"pA": (100, 200)}).close()
    bt_in_process("classify", base_only, "--draws", "2", "--no-cell-pages")
    files |= _classify_files(base_only / "classify")  # unfinished, every other table empty
    return {
        "files": files,
        "headlines": [s[1] / "headlines.json" for s in (studied, unfit_study)],
        "empty_labels": base_only / "classify" / "labels.parquet",
    }


def test_every_table_written_matches_its_declaration(written) -> None:
    for path, table in written["files"].items():
        assert_file_matches(table, path)


def test_the_runs_write_every_table_of_the_pipeline(written) -> None:
    """The fixtures reach every declared table but those they cannot: cross-model agreement
    needs two models and the probe dissection a `bt probe` output (tests/test_output_schemas.py
    writes both from a fabricated run; tests/signals/test_probe_cli.py checks probe_table), and
    the UoO frame is held in memory (checked there too)."""
    got = {t.name for t in written["files"].values()}
    unreached = {"study/cross_model_agreement", "study/probe_dissection", "probe_table"}
    assert got == {t.name for t in TABLES} - unreached - {"uoo_graded"}


def test_headlines_json_matches_its_declaration(written) -> None:
    for path in written["headlines"]:
        check_document(ST.HEADLINES, json.loads(path.read_text(encoding="utf-8")))


def test_an_empty_classify_table_holds_the_declared_columns(written) -> None:
    labels = written["empty_labels"]
    assert pq.read_metadata(labels).num_rows == 0
    assert pq.read_schema(labels).names[:3] == ["cell_id", "model", "problem_id"]


def test_the_study_pages_glossary_links_each_term_to_its_column(studied) -> None:
    """Every glossary term of the study page links to the declaration of the column that holds
    it, on the page itself (docs/outputs.md's words: the page is read offline)."""
    from markupsafe import escape

    from breakthrough.report.names import GLOSSARY, GLOSSARY_COLUMNS, column_anchor

    page = (studied[1] / "index.html").read_text(encoding="utf-8")
    glossary = page.split('<section class="glossary"')[1].split("</section>")[0]
    for term, _ in GLOSSARY:
        refs = GLOSSARY_COLUMNS[term]
        assert refs, term
        for table, column in refs:
            anchor = column_anchor(table, column)
            assert f'href="#{anchor}"' in glossary, (term, anchor)
            assert f'<dt id="{anchor}"><code>{escape(f"{table}.{column}")}</code></dt>' in glossary
    t_f = C.LABELS.column("t_f")
    assert (
        escape(t_f.meaning) in glossary and "empty: censored (event_observed is false)" in glossary
    )
