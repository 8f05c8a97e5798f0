"""The `optimum` grader on a table of answers (uniqueness.md sections 8-9)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from breakthrough.tasks.family import make_grader
from breakthrough.tasks.optimum.grader import OptimumGrader, json_blocks, strip_thinking

ROWS = {
    r["id"]: r
    for r in (
        json.loads(line)
        for line in (Path(__file__).resolve().parents[2] / "cohorts" / "uoo87.jsonl")
        .read_text()
        .splitlines()
    )
}
Q = ROWS["uoo/qubo/b1/r0"]  # min, unique optimum, n = 16
K = ROWS["uoo/knapsack/b3_5/r0"]  # max, 4 optima, n = 18
A = ROWS["uoo/assignment/b2/r0"]  # min, 2 optima, 9x9
S = ROWS["uoo/subset/b1/r0"]  # max, exactly 7 of 18, conflicts
P = ROWS["uoo/portfolio/b2/r0"]  # max, exactly K = 4 of 16
ITEMS = {"Q": Q, "K": K, "A": A, "S": S, "P": P}
assert (Q["n_optima"], K["n_optima"], A["n_optima"]) == (1, 4, 2)


def ans(sol, obj, unique, count, key="num_optima") -> str:
    return json.dumps({"solution": sol, "objective": obj, "unique": unique, key: count})


def good(item, **over) -> str:
    d = {
        "solution": item["example_optimum"],
        "objective": item["optimum"],
        "unique": item["n_optima"] == 1,
        "num_optima": item["n_optima"],
    }
    d.update(over)
    return json.dumps(d)


Qx, Kx, Ax = Q["example_optimum"], K["example_optimum"], A["example_optimum"]
KZERO = [0] * 18  # feasible (empty knapsack), not optimal
KALL = [1] * 18  # over capacity
A0 = [t - 1 for t in Ax]  # 0-based permutation
ADUP = [Ax[0]] * 2 + Ax[2:]  # a task given twice
S_CONFLICT = [1, 0, 1, 1, 1, 1, 1, 1] + [0] * 10  # 7 chosen but items 1 and 3 conflict
P_THREE = [1, 1, 1] + [0] * 13  # 3 assets, K = 4
KJ = good(K)

# (case, item, text, finish_reason, label, parse_error, (optimal, unique, count))
TABLE = [
    ("pass_unique", "Q", "I enumerated.\n" + good(Q), "stop", "pass", None, (1, 1, 1)),
    ("pass_nonunique", "K", "Reasoning...\n" + KJ, "stop", "pass", None, (1, 1, 1)),
    ("pass_fenced", "K", "Answer:\n```json\n" + KJ + "\n```\n", "stop", "pass", None, (1, 1, 1)),
    ("pass_count_float", "K", good(K, num_optima=4.0), "stop", "pass", None, (1, 1, 1)),
    (
        "pass_alias",
        "K",
        good(K).replace("num_optima", "number_of_optima"),
        "stop",
        "pass",
        None,
        (1, 1, 1),
    ),
    (
        "pass_bool_vector",
        "Q",
        good(Q, solution=[bool(v) for v in Qx]),
        "stop",
        "pass",
        None,
        (1, 1, 1),
    ),
    (
        "optimal_undercount_flag_wrong",
        "K",
        ans(Kx, 77, True, 1),
        "stop",
        "count_under",
        None,
        (1, 0, 0),
    ),
    ("optimal_undercount", "K", ans(Kx, 77, False, 2), "stop", "count_under", None, (1, 1, 0)),
    (
        "optimal_overcount_on_unique",
        "Q",
        ans(Qx, -130, False, 2),
        "stop",
        "count_over",
        None,
        (1, 0, 0),
    ),
    (
        "optimal_count_right_flag_wrong",
        "K",
        ans(Kx, 77, True, 4),
        "stop",
        "unique_flag_wrong",
        None,
        (1, 0, 1),
    ),
    ("suboptimal_feasible", "K", ans(KZERO, 0, False, 4), "stop", "suboptimal", None, (0, 1, 1)),
    (
        "objective_right_solution_wrong",
        "K",
        ans(KZERO, 77, False, 4),
        "stop",
        "suboptimal",
        None,
        (0, 1, 1),
    ),
    ("infeasible_overweight", "K", ans(KALL, 77, False, 4), "stop", "infeasible", None, (0, 1, 1)),
    (
        "infeasible_conflict",
        "S",
        ans(S_CONFLICT, 348, True, 1),
        "stop",
        "infeasible",
        None,
        (0, 1, 1),
    ),
    (
        "infeasible_cardinality",
        "P",
        ans(P_THREE, 56, False, 2),
        "stop",
        "infeasible",
        None,
        (0, 1, 1),
    ),
    ("assignment_1based", "A", good(A), "stop", "pass", None, (1, 1, 1)),
    ("assignment_0based", "A", good(A, solution=A0), "stop", "pass", None, (1, 1, 1)),
    ("assignment_duplicate", "A", good(A, solution=ADUP), "stop", "infeasible", None, (0, 1, 1)),
    (
        "assignment_0_and_n",
        "A",
        good(A, solution=[0] + Ax[1:-1] + [9]),
        "stop",
        "malformed",
        "bad_solution_range",
        (0, 0, 0),
    ),
    (
        "assignment_bools",
        "A",
        good(A, solution=[True] * 9),
        "stop",
        "malformed",
        "bad_solution_type",
        (0, 0, 0),
    ),
    (
        "malformed_thousands",
        "K",
        KJ[:-2] + " 2,411}",
        "stop",
        "malformed",
        "json_decode_error",
        (0, 0, 0),
    ),
    (
        "malformed_python_true",
        "K",
        KJ.replace("false", "False"),
        "stop",
        "malformed",
        "json_decode_error",
        (0, 0, 0),
    ),
    (
        "malformed_single_quotes",
        "K",
        KJ.replace('"', "'"),
        "stop",
        "malformed",
        "json_decode_error",
        (0, 0, 0),
    ),
    (
        "malformed_trailing_comma",
        "K",
        KJ[:-1] + ",}",
        "stop",
        "malformed",
        "json_decode_error",
        (0, 0, 0),
    ),
    (
        "malformed_nan",
        "K",
        good(K).replace("77", "NaN"),
        "stop",
        "malformed",
        "json_decode_error",
        (0, 0, 0),
    ),
    (
        "missing_num_optima",
        "K",
        json.dumps({"solution": Kx, "objective": 77, "unique": False}),
        "stop",
        "malformed",
        "missing_key:num_optima",
        (0, 0, 0),
    ),
    (
        "missing_solution",
        "K",
        json.dumps({"objective": 77, "unique": False, "num_optima": 4}),
        "stop",
        "malformed",
        "missing_key:solution",
        (0, 0, 0),
    ),
    (
        "count_string",
        "K",
        good(K, num_optima="4"),
        "stop",
        "malformed",
        "bad_type:num_optima",
        (0, 0, 0),
    ),
    (
        "count_gt50_string",
        "K",
        good(K, num_optima=">50"),
        "stop",
        "malformed",
        "bad_type:num_optima",
        (0, 0, 0),
    ),
    (
        "count_negative",
        "K",
        good(K, num_optima=-1),
        "stop",
        "malformed",
        "bad_value:num_optima",
        (0, 0, 0),
    ),
    (
        "count_fraction",
        "K",
        good(K, num_optima=4.5),
        "stop",
        "malformed",
        "bad_value:num_optima",
        (0, 0, 0),
    ),
    (
        "unique_string",
        "K",
        good(K, unique="false"),
        "stop",
        "malformed",
        "bad_type:unique",
        (0, 0, 0),
    ),
    (
        "objective_string",
        "K",
        good(K, objective="77"),
        "stop",
        "malformed",
        "bad_type:objective",
        (0, 0, 0),
    ),
    (
        "solution_short",
        "K",
        good(K, solution=Kx[:-1]),
        "stop",
        "malformed",
        "bad_solution_shape",
        (0, 0, 0),
    ),
    (
        "solution_index_list",
        "K",
        good(K, solution=[i + 1 for i, v in enumerate(Kx) if v]),
        "stop",
        "malformed",
        "bad_solution_shape",
        (0, 0, 0),
    ),
    (
        "solution_value_2",
        "K",
        good(K, solution=[2] + Kx[1:]),
        "stop",
        "malformed",
        "bad_solution_range",
        (0, 0, 0),
    ),
    ("no_json", "K", "The number of optima is 4.", "stop", "malformed", "no_json", (0, 0, 0)),
    (
        "json_without_answer_keys",
        "K",
        'Result: {"a": 1}',
        "stop",
        "malformed",
        "no_json",
        (0, 0, 0),
    ),
    ("extra_text_after_json", "K", KJ + "\nHope this helps!", "stop", "pass", None, (1, 1, 1)),
    ("boxed_after_json", "K", KJ + "\n\\boxed{4}", "stop", "pass", None, (1, 1, 1)),
    (
        "json_only_in_think",
        "K",
        "<think>\n" + KJ + "\n</think>\nThere are 4 optima.",
        "stop",
        "malformed",
        "no_json",
        (0, 0, 0),
    ),
    (
        "think_decoy_then_answer",
        "Q",
        "<think>" + ans(Qx, -1, False, 9) + "</think>\n" + good(Q),
        "stop",
        "pass",
        None,
        (1, 1, 1),
    ),
    (
        "think_right_answer_wrong",
        "Q",
        "<think>" + good(Q) + "</think>\n" + ans(Qx, -130, False, 3),
        "stop",
        "count_over",
        None,
        (1, 0, 0),
    ),
    (
        "channel_thought_only",
        "K",
        "<|channel>thought\n" + KJ + "<channel|>I am not sure.",
        "stop",
        "malformed",
        "no_json",
        (0, 0, 0),
    ),
    (
        "channel_thought_then_answer",
        "K",
        "<|channel>thought\n" + ans(KZERO, 0, True, 1) + "<channel|>" + KJ,
        "stop",
        "pass",
        None,
        (1, 1, 1),
    ),
    (
        "mistral_think_only",
        "K",
        "[THINK]" + KJ + "[/THINK]No idea.",
        "stop",
        "malformed",
        "no_json",
        (0, 0, 0),
    ),
    (
        "mistral_think_then_answer",
        "K",
        "[THINK]draft[/THINK]" + KJ,
        "stop",
        "pass",
        None,
        (1, 1, 1),
    ),
    (
        "unclosed_think_length",
        "K",
        "<think>\nLet me try " + KJ + " and check",
        "length",
        "truncated",
        "no_json",
        (0, 0, 0),
    ),
    (
        "unclosed_think_stop",
        "K",
        "<think>\nLet me try " + KJ,
        "stop",
        "malformed",
        "no_json",
        (0, 0, 0),
    ),
    (
        "truncated_mid_json",
        "K",
        "Counting...\n" + KJ[:40],
        "length",
        "truncated",
        "no_json",
        (0, 0, 0),
    ),
    ("length_but_complete", "K", "Done.\n" + KJ, "length", "pass", None, (1, 1, 1)),
    (
        "draft_then_final",
        "K",
        ans(KZERO, 0, True, 1) + "\nWait, better:\n" + KJ,
        "stop",
        "pass",
        None,
        (1, 1, 1),
    ),
    (
        "right_draft_then_bad_final",
        "K",
        KJ + "\nFinal:\n" + KJ[:-2] + " 2,411}",
        "stop",
        "malformed",
        "json_decode_error",
        (0, 0, 0),
    ),
    ("brace_in_string", "K", KJ[:-1] + ', "note": "a } brace"}', "stop", "pass", None, (1, 1, 1)),
]


@pytest.mark.parametrize(
    "case,item,text,finish,label,error,checks", TABLE, ids=[row[0] for row in TABLE]
)
def test_grader_table(case, item, text, finish, label, error, checks) -> None:
    g = OptimumGrader().grade(text, ITEMS[item], finish)
    d = g.detail
    assert d["label"] == label, d
    assert d["parse_error"] == error
    assert tuple(int(d["checks"][k]) for k in ("optimal", "unique", "count")) == checks
    assert d["score"] == int(all(checks))
    assert g.correct is (label == "pass")
    assert g.grader == "optimum" and g.version == "uoo-grader-1"
    json.dumps(g.to_dict())  # the stored grade is JSON-serialisable


def test_table_size() -> None:
    assert len(TABLE) >= 30


def test_status_mapping_and_diagnostics() -> None:
    g = OptimumGrader()
    assert g.grade("nothing", K).status == "missing"
    assert g.grade(KJ[:-1] + ",}", K).status == "malformed"
    assert g.grade("<think>" + KJ, K, "length").status == "truncated"
    assert g.grade(ans(KZERO, 0, False, 4), K).status == "wrong"
    assert g.grade(KJ, K).status == "correct"
    # objective claimed right, solution wrong: the claim is never trusted
    d = g.grade(ans(KZERO, 77, False, 4), K).detail["diag"]
    assert d["claimed_objective_is_optimum"] and not d["objective_claim_consistent"]
    assert d["recomputed_objective"] == 0 and d["objective_gap"] == 77
    # fenced / trailing text diagnostics
    d = g.grade("```json\n" + KJ + "\n```", K).detail["diag"]
    assert d["json_at_end"] and not d["strict_last_line_ok"]
    d = g.grade(KJ + "\nHope this helps!", K).detail["diag"]
    assert not d["json_at_end"] and not d["strict_last_line_ok"]
    assert g.grade("x\n" + KJ + "\n", K).detail["diag"]["strict_last_line_ok"]
    # count anatomy
    d = g.grade(ans(Kx, 77, False, 2), K).detail["diag"]
    assert d["count_direction"] == "under" and d["within_x2"] and d["count_log2_ratio"] == -1.0
    assert not d["same_bin"] and d["self_consistent"]
    d = g.grade(ans(Kx, 77, True, 0), K).detail["diag"]
    assert d["count_log2_ratio"] is None and not d["within_x2"]
    # lenient diagnostic: format-only failures
    assert g.grade(KJ.replace("false", "False"), K).detail["diag"]["lenient_parse_ok"]
    assert g.grade(KJ[:-2] + " 2,411}", K).detail["diag"]["lenient_parse_ok"]  # 2411: parses
    idx = good(K, solution=[i + 1 for i, v in enumerate(Kx) if v])
    assert g.grade(idx, K).detail["diag"]["lenient_parse_ok"]
    assert not g.grade(good(K, num_optima=">50"), K).detail["diag"]["lenient_parse_ok"]
    # alias and 0-based flags
    assert g.grade(good(K).replace("num_optima", "number_of_optima"), K).detail["diag"][
        "alias_used"
    ]
    assert g.grade(good(A, solution=A0), A).detail["diag"]["zero_based"] is True
    assert g.grade(good(A), A).detail["diag"]["zero_based"] is False


def test_every_shipped_item_example_scores_and_count_off_by_one() -> None:
    g = make_grader("optimum")
    jobs = []
    for item in ROWS.values():
        jobs.append((good(item), item, "stop"))
        jobs.append((good(item, num_optima=item["n_optima"] + 1, unique=False), item, "stop"))
        jobs.append(
            (
                good(item, num_optima=item["n_optima"] - 1, unique=item["n_optima"] == 2),
                item,
                "stop",
            )
        )
    grades = g.grade_many(jobs)
    labels = [gr.detail["label"] for gr in grades]
    assert labels[0::3] == ["pass"] * 87
    assert labels[1::3] == ["count_over"] * 87
    assert labels[2::3] == ["count_under"] * 87


def test_extraction_helpers() -> None:
    assert strip_thinking("<think>a</think>b") == ("b", "think")
    assert strip_thinking("<think>a") == ("", "think")
    assert strip_thinking("plain") == ("plain", None)
    t = 'x {"a": "}"} y {"b": {"c": 1}} {unclosed'
    assert [t[s:e] for s, e in json_blocks(t)] == ['{"a": "}"}', '{"b": {"c": 1}}']


def test_hostile_answers_never_raise() -> None:
    g = OptimumGrader()
    huge = good(K, num_optima=10**400)
    d = g.grade(huge, K).detail
    assert d["label"] == "count_over" and d["diag"]["count_log2_ratio"] > 1000
    assert g.grade(good(K, num_optima=1e300), K).detail["label"] == "count_over"
    deep = '{"optima": ' + "[" * 5000 + "]" * 5000 + "}"
    assert g.grade(deep, K).detail["parse_error"] == "json_decode_error"
    assert g.grade("", K).detail["parse_error"] == "no_json"
    assert g.grade(None, K).detail["parse_error"] == "no_json"  # type: ignore[arg-type]


@settings(max_examples=150, deadline=None)
@given(st.text(alphabet='{}[]":,0123456789 -.truefalsnuoptimasolution\\<>/thk\n', max_size=300))
def test_random_text_grades_without_error(text: str) -> None:
    for item in (K, A):
        d = OptimumGrader().grade(text, item, "stop").detail
        assert d["label"] in {
            "malformed",
            "infeasible",
            "suboptimal",
            "count_under",
            "count_over",
            "unique_flag_wrong",
            "pass",
        }
