"""`stop` strings (vLLM's / OpenAI's): the row ends at the first token after which the
generated text contains one of them; the answer's text is cut before it (or after it, with
`include_stop_str_in_output`), its tokens end with that token, finish_reason "stop".

The engine matches token ids, not text, so each stop string becomes token-id stop sequences
that certainly spell it (every single token whose text holds it, and the string's own
tokenization): the common ways a model writes it end the row at once. A rarer spelling (the
string split across tokens some other way) does not end the row early, but the answer is cut
all the same: `find_stop` reads the decoded text, and with per-row seeds the tokens before the
cut are the ones an earlier stop would have produced."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any

from breakthrough.engine.contract import GenResult
from breakthrough.models.tokens import decode, encode_text, token_strings

MAX_STOPS = 16  # stop strings per request at most
MAX_STOP_CHARS = 256  # characters per stop string at most
CACHED_STOPS = 256  # stop strings whose token sequences are kept
# Token sequences per stop string at most: a short string ("e") is in half the vocabulary, and
# the engine builds each request's stop automaton (24k sequences: 0.3 s on the generation
# thread). Fewer only means a rarer token does not end the row early; the cut stays exact.
SEQUENCES_PER_STOP = 128


@dataclass(frozen=True)
class StopHit:
    """Where a stop string first appears: after `tokens` generated tokens, `stop` is in the text."""

    tokens: int
    stop: str


class StopStrings:
    """A stop string's token-id stop sequences for one tokenizer (computed once per string)."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        self._pieces: list[str] | None = None
        self._cache: OrderedDict[str, tuple[tuple[int, ...], ...]] = OrderedDict()

    def pieces(self) -> list[str]:
        """Every token's own text (special tokens kept), decoded once at the first stop string."""
        if self._pieces is None:
            self._pieces = token_strings(self.tokenizer, range(len(self.tokenizer)))
        return self._pieces

    def sequences(self, stop: str) -> tuple[tuple[int, ...], ...]:
        """Token-id sequences whose text contains `stop` (each one ends the row): its own
        tokenization, then the tokens whose text holds it, at most SEQUENCES_PER_STOP."""
        if stop in self._cache:
            self._cache.move_to_end(stop)
            return self._cache[stop]
        seqs: list[tuple[int, ...]] = []
        own = tuple(encode_text(self.tokenizer, stop))
        if len(own) > 1 and stop in decode(self.tokenizer, own):
            seqs.append(own)
        for i, piece in enumerate(self.pieces()):  # BPE ids: the commonest tokens first
            if len(seqs) >= SEQUENCES_PER_STOP:
                break
            if stop in piece:
                seqs.append((i,))
        self._cache[stop] = out = tuple(seqs)
        while len(self._cache) > CACHED_STOPS:
            self._cache.popitem(last=False)
        return out


def find_stop(tokenizer: Any, tokens: Sequence[int], stops: Sequence[str]) -> StopHit | None:
    """The first generated token after which the text (special tokens kept) holds one of
    `stops`, and that stop (the one starting earliest there); None when none appears."""
    if not stops or not tokens or not any(s in decode(tokenizer, tokens) for s in stops):
        return None
    lo, hi = 1, len(tokens)  # the text of tokens[:hi] holds a stop; find the least such hi
    while lo < hi:
        mid = (lo + hi) // 2
        if any(s in decode(tokenizer, tokens[:mid]) for s in stops):
            hi = mid
        else:
            lo = mid + 1
    text = decode(tokenizer, tokens[:hi])
    found = [(text.find(s), -len(s), s) for s in stops if s in text]
    return StopHit(hi, min(found)[2])


def cut(res: GenResult, n: int) -> GenResult:
    """`res` with only its first `n` tokens (and their statistics): ended by a stop string."""

    def head(a: Any) -> Any:
        return None if a is None else a[:n]

    return replace(
        res,
        tokens=list(res.tokens[:n]),
        logprobs=res.logprobs[:n],
        entropies=res.entropies[:n],
        sampling_entropies=head(res.sampling_entropies),
        top_ids=head(res.top_ids),
        top_logprobs=head(res.top_logprobs),
        entropy_bounds=head(res.entropy_bounds),
        signals=None,
        hidden=None,
        finish_reason="stop_sequence",
    )
