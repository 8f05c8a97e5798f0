"""Token ids <-> text the way the rest of bt sees it: special tokens kept, no clean-up.

Graders read `decode` (protocol 2.1 step 5: a thinking marker is text the grader must see), and
segmentation reads `token_strings`, one decoded string per token (protocol 3.2). Marker and
forced-close texts become ids with `encode_text`, never with added BOS/EOS tokens."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def encode_text(tokenizer: Any, text: str) -> list[int]:
    """Token ids of a marker or forced-close text (no special tokens added)."""
    return list(tokenizer.encode(text, add_special_tokens=False))


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """The text graders see: special tokens kept, no clean-up (protocol 2.1 step 5)."""
    return tokenizer.decode(
        [int(i) for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
    )


def token_strings(tokenizer: Any, ids: Sequence[int]) -> list[str]:
    """Per-token decoded strings with special tokens kept (the input of segmentation)."""
    return list(
        tokenizer.batch_decode(
            [[int(i)] for i in ids], skip_special_tokens=False, clean_up_tokenization_spaces=False
        )
    )
