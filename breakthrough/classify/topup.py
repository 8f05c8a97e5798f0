"""The `--topup` vocabulary, defined once for `bt continue` and `bt classify` (pure, and free of
pandas, so command modules may import it at start-up).

    terminal    A1: replicate a censored trajectory's final anchor (canonical rate ≥ τ) to 8
    ambiguous   A5.1: enlarge every probe and restart cell at 1–3 of 4 to 8 (the amendment
                asks for restart cells too; the study never ran it)
    posterior   enlarge every probe and restart cell whose P(rate ≥ τ) lies strictly inside
                the protocol's posterior band (`Protocol.posterior_band`, `Protocol.prior`)
    none        no top-up (bisection only)

Words combine with commas; "terminal,ambiguous" is the study's rule and the default.
"ambiguous" and "posterior" are two answers to one question (which uncertain cells to
enlarge), so they do not combine. `breakthrough.classify.plan.plan_next` applies the rules;
in `bt classify` they also decide which top-up branches a rate counts
(`breakthrough.classify.pooling`: only cells the uncertainty rule enlarges; A1 never).
"""

from __future__ import annotations

from collections.abc import Iterable

from breakthrough.errors import BtError

# --topup word → the `PlanItem.reason` of the items that rule asks for (in vocabulary order).
TOPUP_RULES: dict[str, str] = {
    "terminal": "terminal_a1",
    "ambiguous": "ambiguity",
    "posterior": "posterior",
}
TOPUP_DEFAULT = "terminal,ambiguous"
TOPUP_HELP = (
    "Top-up rules, comma-separated: terminal (A1 replication of a censored final "
    "anchor), ambiguous (the study's 1-3 of 4 -> 8) or instead posterior "
    "(P(rate>=tau) inside the posterior band); or none."
)


def topup_rules(value: str | Iterable[str]) -> tuple[str, ...]:
    """The rules of a `--topup` value ("terminal,ambiguous", "posterior", "none", or words
    already split, () meaning none) in vocabulary order. ValueError on an unknown word, an
    empty text, or "ambiguous" together with "posterior"."""
    text = isinstance(value, str)
    parts = value.split(",") if isinstance(value, str) else list(value)
    if isinstance(value, str) and "" in [w.strip() for w in parts] and value.strip():
        raise ValueError(
            f"an element of {value!r} is empty; expected a comma-separated list of "
            f"{', '.join(TOPUP_RULES)}, or none"
        )
    words = [w.strip() for w in parts if w.strip()]
    if words == ["none"] or (not text and not words):
        return ()
    bad = [w for w in words if w not in TOPUP_RULES]
    if bad or not words:
        raise ValueError(
            f"expected a comma-separated list of {', '.join(TOPUP_RULES)}, or none; "
            f"got {value if text else ','.join(words)!r}"
        )
    if "ambiguous" in words and "posterior" in words:
        raise ValueError(
            "'ambiguous' and 'posterior' are alternative rules for the same cells; choose one"
        )
    return tuple(w for w in TOPUP_RULES if w in words)


def parse_topup(text: str) -> tuple[str, ...]:
    """`--topup TEXT` of `bt continue` and `bt classify`: the rules, or a BtError naming the
    option."""
    try:
        return topup_rules(text)
    except ValueError as exc:
        raise BtError(f"--topup: {exc}") from None


def topup_text(rules: str | Iterable[str]) -> str:
    """The canonical `--topup` text of rules ("terminal,ambiguous", "none"): the key of a plan
    in `bt classify`'s summary and plan.json."""
    return ",".join(topup_rules(rules)) or "none"
