"""The declared output schemas (breakthrough/schemas): docs/outputs.md is their rendering, every
example row is a valid row of its table, and the checks refuse what a writer must never write
(an undeclared column, another type, an empty value where none may be). The files written from
real runs are checked in tests/report/test_output_files.py."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pyarrow.parquet as pq
import pytest
from bt_cli import assert_one_line_error, run_bt

from breakthrough.schemas import classify as C
from breakthrough.schemas.check import SchemaError, check, check_document, conform
from breakthrough.schemas.columns import Column, Family, Table
from breakthrough.schemas.docs import REGENERATE, outputs_markdown
from breakthrough.schemas.registry import DOCUMENTS, OUTPUTS, TABLES
from breakthrough.schemas.study import HEADLINES
from breakthrough.schemas.uoo import GRADED
from breakthrough.schemas.write import write_csv, write_parquet

DOCS = Path(__file__).resolve().parents[1] / "docs" / "outputs.md"


def test_docs_outputs_md_is_the_declarations_rendering() -> None:
    assert DOCS.read_text(encoding="utf-8") == outputs_markdown(), (
        f"docs/outputs.md differs from the declarations: run `{REGENERATE}`"
    )


def test_every_output_is_documented_once_by_name() -> None:
    text = DOCS.read_text(encoding="utf-8")
    names = [o.name for o in OUTPUTS]
    assert len(set(names)) == len(names)
    for name in names:
        assert text.count(f"\n## {name}\n") == 1, name


@pytest.mark.parametrize("table", TABLES, ids=lambda t: t.name)
def test_each_declaration_is_complete_and_its_example_row_valid(table: Table) -> None:
    for c in table.columns:
        assert c.meaning.strip().endswith((".", ")")), (table.name, c.name)
        if c.type == "str" and isinstance(c, Column) and c.unit:
            pytest.fail(f"{table.name}.{c.name}: a text column has no unit")
    row = table.example_row()
    frame = conform(table, pd.DataFrame([row]))
    check(table, frame)
    for c in table.columns:  # an example is empty only where the column may be
        if isinstance(c, Column) and (c.example is None or c.example != c.example):
            assert c.nullable, (table.name, c.name)


def test_family_members_are_matched_in_place() -> None:
    labels = C.LABELS
    row = labels.example_row()
    assert [k for k in row if k.startswith("R_")] == ["R_1024", "R_2048", "R_4096", "R_8192"]
    r = labels.column("R_512")
    assert isinstance(r, Family) and r.template == "R_{C}"
    assert labels.column("t_v_cons_d050").name == "t_v_cons_d{δ}"
    assert labels.column("t_v").name == "t_v"


def _labels_frame() -> pd.DataFrame:
    return conform(C.LABELS, pd.DataFrame([C.LABELS.example_row()]))


def test_an_undeclared_column_is_refused() -> None:
    frame = _labels_frame().assign(surprise=1)
    with pytest.raises(SchemaError, match="'surprise' is not declared"):
        check(C.LABELS, conform(C.LABELS, frame))


def test_another_type_is_refused() -> None:
    frame = _labels_frame().assign(final_rate="high")
    with pytest.raises(SchemaError, match="'final_rate': float64 declared"):
        check(C.LABELS, frame)


def test_an_empty_value_where_none_may_be_is_refused() -> None:
    frame = _labels_frame().assign(regime=[None])
    with pytest.raises(SchemaError, match="'regime': declared never empty"):
        check(C.LABELS, frame)


def test_a_missing_required_column_is_refused_and_a_nullable_one_added() -> None:
    frame = _labels_frame().drop(columns=["subject", "regime"])
    conformed = conform(C.LABELS, frame)
    assert "subject" in conformed.columns and conformed["subject"].isna().all()
    with pytest.raises(SchemaError, match="'regime' is declared but missing"):
        check(C.LABELS, conformed)


def test_integers_read_as_floats_for_missing_values_are_written_as_integers(tmp_path) -> None:
    # SQLite's NULLs read as NaN make an integer column float in pandas (a cell whose base
    # trace failed has no reasoning_tokens): the file holds int64 with a null, as declared.
    frame = _labels_frame()
    frame = pd.concat([frame, frame.assign(cell_id="g:other")], ignore_index=True)
    frame["reasoning_tokens"] = [float("nan"), 12.0]
    path = write_parquet(C.LABELS, frame, tmp_path / "labels.parquet")
    back = pd.read_parquet(path)
    assert str(back["reasoning_tokens"].dtype) == "Int64"
    assert back["reasoning_tokens"].isna().tolist() == [True, False]


def test_a_column_empty_in_every_row_keeps_its_declared_type(tmp_path) -> None:
    frame = _labels_frame()  # no A1 event: terminal_a1_* are all empty
    path = write_parquet(C.LABELS, frame, tmp_path / "labels.parquet")
    types = {f.name: str(f.type) for f in pq.read_schema(path)}
    assert types["terminal_a1_rate"] == "double"
    assert types["terminal_a1_proxy"] == "bool"
    assert types["terminal_a1_anchor"] == "int64"


def test_an_empty_table_is_the_declared_one(tmp_path) -> None:
    path = write_parquet(C.CURVES, pd.DataFrame(), tmp_path / "curves.parquet")
    schema = pq.read_schema(path)
    assert schema.names == [c.name for c in C.CURVES.columns]
    assert pq.read_metadata(path).num_rows == 0


def test_csv_holds_the_same_columns_and_lists_as_json(tmp_path) -> None:
    from breakthrough.schemas.export import SAMPLES

    row = SAMPLES.example_row()
    path = write_csv(SAMPLES, pd.DataFrame([row]), tmp_path / "samples.csv")
    back = pd.read_csv(path)
    assert list(back.columns) == list(row)
    assert json.loads(back["token_ids"][0]) == row["token_ids"]


def test_headlines_document_is_checked() -> None:
    doc = {f.name: f.example for f in HEADLINES.fields}
    doc["headlines"] = [{f.name: f.example for f in HEADLINES.fields[2].fields}]
    doc["missing"] = [{f.name: f.example for f in HEADLINES.fields[3].fields}]
    assert check_document(HEADLINES, doc) is doc
    with pytest.raises(SchemaError, match="headlines\\[0\\].extra: not declared"):
        check_document(HEADLINES, doc | {"headlines": [doc["headlines"][0] | {"extra": 1}]})
    with pytest.raises(SchemaError, match="runs: list declared, str found"):
        check_document(HEADLINES, doc | {"runs": "r"})
    assert DOCUMENTS == (HEADLINES,)


ANSWER = {"solution": [0, 0, 1], "objective": 3, "unique": True, "num_optima": 1}


def test_the_uoo_graded_frame_matches_its_declaration() -> None:
    from breakthrough.report.uoo import graded_frame

    item = {
        "id": "uoo/subset/b1/r0", "kind": "subset", "bin": "b1", "rep": 0, "n_optima": 1,
        "optimum": 3, "sense": "max",
        "instance": {"n": 3, "values": [1, 2, 3], "k": 1, "conflicts": []},
    }  # fmt: skip
    samples = pd.DataFrame(
        {
            "problem_id": [item["id"]] * 2,
            "text": [
                '{"solution": [0, 0, 1], "objective": 3, "unique": true, "num_optima": 1}',
                "",
            ],
            "finish_reason": ["stop", "length"],
            "model": ["m", "m"],
            "seed": [1, 2],
        }
    )
    frame = graded_frame(samples, {item["id"]: item}, run="r")
    assert len(frame) == 2 and math.isnan(frame["claimed_count"].iloc[1])
    check(GRADED, frame)


def test_bt_schema_prints_a_table_and_names_the_tables_for_a_wrong_name() -> None:
    proc = run_bt("schema", "labels")
    assert proc.returncode == 0, proc.stderr
    assert "`interval_upper`" in proc.stdout and "`R_{C}` (family)" in proc.stdout
    assert '"regime": "prefix_limited"' in proc.stdout  # the example row
    wrong = run_bt("schema", "label")
    assert_one_line_error(wrong, 2, "no output table named 'label'", "labels, curves")


def test_the_study_tables_of_a_two_model_run_match_their_declarations(tmp_path) -> None:
    """The fabricated run of tests/classify_fixture.py (two models, an A1 event, top-ups) with
    a `bt probe` summary: the study page's tables, cross-model agreement and the probe
    dissection among them, written and read back."""
    from classify_fixture import cell_spec, write_store
    from schema_files import assert_file_matches

    from breakthrough.analyses.study import study_report
    from breakthrough.schemas.signals import PROBE_TABLE
    from breakthrough.schemas.study import BY_KEY

    run = write_store(tmp_path / "runs" / "fx", cell_spec(), subject="Algebra")
    probe = tmp_path / "probe"  # a `bt probe` summary: its table as probe_table.csv holds it
    probe.mkdir()
    loo = PROBE_TABLE.example_row() | {"arm": "loo", "score": "loo", "t": None}
    (probe / "probe_summary.json").write_text(
        json.dumps({"table": [PROBE_TABLE.example_row(), loo]}), encoding="utf-8"
    )
    rep = study_report([run], probes=[probe], draws=2, cell_pages=False)
    names = {p.stem for p in rep.tables}
    assert {"cross_model_agreement", "matched_compute", "probe_dissection"} <= names
    for path in rep.tables:
        assert_file_matches(BY_KEY[path.stem], path)
    check_document(HEADLINES, json.loads((rep.out_dir / "headlines.json").read_text()))


def test_a_column_missing_in_every_row_is_written_with_its_declared_type(tmp_path) -> None:
    """An ungraded run: `correct` is NaN everywhere (pandas holds it as float), and the file
    says bool with nulls, as it does for a graded run."""
    from breakthrough.schemas.export import CELLS, SAMPLES

    row = SAMPLES.example_row() | {"correct": float("nan"), "grade_status": None}
    path = write_parquet(SAMPLES, pd.DataFrame([row, row]), tmp_path / "samples.parquet")
    types = {f.name: str(f.type) for f in pq.read_schema(path)}
    assert types["correct"] == "bool" and types["grade_status"] == "large_string"
    cells = pd.DataFrame([CELLS.example_row() | {"level": float("nan")}])
    assert str(conform(CELLS, cells)["level"].dtype) == "Int64"
