"""Option checks and wording shared by the commands (`bt base`, `bt continue`, ...): each refusal is
one line naming the option, raised before any store is opened or model loaded."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from breakthrough.errors import BtError

# The engine options of every command that generates (`bt base`, `bt continue`), defined once.
# Each `*_option()` returns `typer.Option(...)`, typed Any as typer types it, so that a
# parameter's annotation is its value's type (`backend: str = backend_option()`).
BACKEND_HELP = (
    "Generation backend: mlx (in-process; one prefill per base trace, default) or "
    "mlx-fresh (the same tokens without any prefix reuse; for checks), or a server: "
    "vllm (also `bt serve`) or sglang, with --endpoint. A run never mixes backends."
)


def backend_option() -> Any:
    return typer.Option("mlx", help=BACKEND_HELP)


def endpoint_option() -> Any:
    return typer.Option(
        None,
        help="--backend vllm|sglang: server URL(s), comma-separated (a fleet: "
        "every request of a cell goes to one server); `bt serve` answers "
        "as vllm.",
    )


def max_inflight_option() -> Any:
    return typer.Option(
        0, help="Requests in flight per endpoint (0: the server's reported limit, else 16)."
    )


def request_timeout_option() -> Any:
    from breakthrough.engine.http_limits import REQUEST_TIMEOUT_S  # EngineSpec's default

    return typer.Option(
        REQUEST_TIMEOUT_S,
        "--request-timeout",
        metavar="SECONDS",
        help="--backend vllm|sglang: seconds one attempt of a request may take "
        "(connecting, sending, each read of the answer) before it is "
        "retried; a request's deadline is (--retries + 1) x SECONDS plus the "
        "back-offs (0.5 s, 1 s, 2 s ... at most 8 s; with the defaults 1,801.5 "
        "s), after which its cell is stored as failed and a rerun retries it.",
    )


def retries_option() -> Any:
    from breakthrough.engine.http_limits import RETRIES  # EngineSpec's default

    return typer.Option(
        RETRIES,
        "--retries",
        metavar="N",
        help="--backend vllm|sglang: further attempts of a request after a "
        "connection error, timeout, 5xx / 429 answer or malformed body "
        "(0: one attempt only); all within the request's deadline.",
    )


def api_key_option() -> Any:
    return typer.Option(
        None,
        "--api-key",
        metavar="KEY",
        envvar="BT_API_KEY",
        show_envvar=True,
        show_default=False,
        help="--backend vllm|sglang: send `Authorization: Bearer KEY` with every "
        "request (a `bt serve --api-key`, or a vLLM --api-key). Prefer the "
        "environment variable: a command line is visible to other users.",
    )


def processed_logprobs_option() -> Any:
    return typer.Option(
        False,
        "--accept-processed-logprobs",
        help="Use a server whose log-probs are taken after temperature / top-k "
        "(refused by default).",
    )


HIDDEN_STRIDE_HELP = (
    "Store the final-normalised hidden vector (float16) of every Nth generated token of each "
    "trajectory (protocol 2.2: 8; 0: store none) in RUN/hidden/<sample_id>.npz (arrays "
    "token_index int32 and hidden float16 [rows, d]; size and sha256 in the store's "
    "hidden_vectors table). Size: d x 2 bytes / N per token, i.e. 1,000 x d x 2 / N bytes per "
    "1,000 tokens (d = 2,048, N = 8: 512 KB). Default: 8 on the mlx backends, 0 on vllm / "
    "sglang (servers return no hidden states). A run never mixes strides."
)


def hidden_stride_option() -> Any:
    return typer.Option(
        None, "--hidden-stride", metavar="N", show_default=False, help=HIDDEN_STRIDE_HELP
    )


def hidden_stride_for(value: int | None, backend: str) -> int:
    """--hidden-stride as given, or when absent protocol 2.2's 8 on the in-process backends and
    0 on the HTTP ones (which cannot return hidden states; asking them explicitly is refused by
    the pipeline in one line)."""
    from breakthrough.engine.contract import HTTP_BACKENDS  # numpy: not at `bt` start-up
    from breakthrough.protocol import HIDDEN_STRIDE

    if value is not None:
        return value
    return 0 if backend in HTTP_BACKENDS else HIDDEN_STRIDE


# Posterior redraws and bootstrap draws (`bt classify --draws`, `bt report study --draws`, `bt auroc
# --bootstrap`, `bt probe --bootstrap`, `bt confirm --draws`): a Monte Carlo share's standard
# error at 100,000 draws is below 0.2 points, and memory and time grow with the count (10^12
# draws asked numpy for 36 TiB), so the options stop there.
MAX_DRAWS = 100_000


# `bt base|continue|sample` ended, but some requests failed (an HTTP backend gave up on them;
# they are stored in the run's errors table): the run is incomplete, a rerun retries exactly those.
EXIT_FAILURES = 3


def count(n: int, noun: str) -> str:
    """ "1 problem", "2 problems": counts in messages agree with their nouns."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


MEMORY_GB_HELP = (
    "Memory for the KV caches (the rows in flight and the shared prefixes): "
    "'auto' (this machine's Metal recommended working set on Apple silicon, the "
    "available RAM elsewhere, minus the weights and a margin) or a number of GB. "
    "Rows are admitted while their own tokens fit; --dry-run and the closing line "
    "say how many rows that is at the deepest anchor."
)
MAX_MEMORY_GB = 1 << 20  # a petabyte-scale typo is refused, not multiplied into an overflow


def memory_budget(text: str | None) -> int | None:
    """`--memory-gb auto|GB` as the engine's budget in bytes (None: auto), checked before
    anything is written: a positive, finite number of GB up to MAX_MEMORY_GB that is at least
    one byte (the engine reads a budget of 0 as no cap, the opposite of a tiny one)."""
    if text is None or str(text).strip().lower() == "auto":
        return None
    try:
        gb = float(text)
    except ValueError:
        raise BtError(f"--memory-gb: expected 'auto' or a number of GB, got {text!r}") from None
    if not 0 < gb <= MAX_MEMORY_GB:  # also refuses nan and inf
        raise BtError(
            f"--memory-gb: expected 'auto' or a number of GB in (0, {MAX_MEMORY_GB}], got {text}"
        )
    budget = int(gb * 2**30)
    if budget < 1:  # a positive budget that rounds to 0 bytes is no budget: never "no cap"
        raise BtError(
            f"--memory-gb {text}: less than one byte ({gb:g} GB); expected 'auto' or a number "
            f"of GB that can hold at least one row"
        )
    return budget


def check_engine_options(backend: str, batch_size: int, memory_gb: str | None = None) -> None:
    """--backend is known, --batch-size is a positive row count (both checked by `EngineSpec`,
    their one home), --memory-gb is auto or a positive number of GB."""
    from breakthrough.engine.contract import EngineSpec  # numpy: not at `bt` start-up

    EngineSpec(backend=backend, batch_size=batch_size)
    memory_budget(memory_gb)


def int_list(text: str | None, option: str, *, high: int | None = None) -> tuple[int, ...] | None:
    """A comma-separated list option (--anchors, --restarts, ...) checked whole before anything
    is written: no empty element (`4,,8` is a typo, not 4,8), integers in 1..`high`, each once,
    increasing. None (option not given) stays None."""
    from breakthrough.protocol import MAX_TOKENS

    if text is None:
        return None
    high = MAX_TOKENS if high is None else high
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        raise BtError(f"{option}: empty; expected comma-separated integers (e.g. 4,8,16)")
    values: list[int] = []
    for i, part in enumerate(parts, 1):
        if not part:
            raise BtError(
                f"{option}: element {i} of {text!r} is empty; expected comma-separated "
                "integers (e.g. 4,8,16)"
            )
        try:
            v = int(part)
        except ValueError:
            raise BtError(
                f"{option}: expected comma-separated integers, got {part!r} in {text!r}"
            ) from None
        if not 1 <= v <= high:
            raise BtError(f"{option}: {v} is out of range (1..{high:,})")
        if v in values:
            raise BtError(f"{option}: {v} appears twice in {text!r}; each value once")
        values.append(v)
    if values != sorted(values):
        raise BtError(
            f"{option}: expected increasing values, got {text!r} "
            f"(e.g. {','.join(map(str, sorted(values)))})"
        )
    return tuple(values)


def given_text(value: str | None, option: str) -> str | None:
    """An option that names something (--problems, --model, --run): None when not given, refused
    when given empty (`--problems ''` is a mistake, never "all problems")."""
    if value is not None and not str(value).strip():
        raise BtError(f"{option}: empty value; leave the option out, or name something")
    return value


def model_names(
    model: str | None, problems: str | None, run: str | None, cohort: str | None
) -> tuple[str, ...] | None:
    """The `--model` names of a command that generates (None: not given), once --model,
    --problems, --run and --cohort are checked: none given empty, no empty element in the
    --model and --problems lists."""
    for value, option in (
        (model, "--model"),
        (problems, "--problems"),
        (run, "--run"),
        (cohort, "--cohort"),
    ):
        given_text(value, option)
    models, _ = name_list(model, "--model"), name_list(problems, "--problems")
    return models


def name_list(text: str | None, option: str) -> tuple[str, ...] | None:
    """A comma-separated list of names (--model, --problems) checked whole: no empty element
    (`--model X,` or `a,,b` is a typo, never "X and nothing"). None (not given) stays None."""
    if text is None:
        return None
    parts = [p.strip() for p in str(text).split(",")]
    if not any(parts):
        raise BtError(f"{option}: empty value; leave the option out, or name something")
    for i, part in enumerate(parts, 1):
        if not part:
            raise BtError(
                f"{option}: element {i} of {text!r} is empty; expected comma-separated "
                "names (e.g. a,b)"
            )
    return tuple(parts)


def path(option: str):
    """typer's `parser=` for a folder or file option (--runs-dir, --out): the text as a Path,
    refused when empty (`--runs-dir ''` is Path('.'), which wrote runs into the working
    directory)."""

    def path(value: str | Path) -> Path:
        if isinstance(value, Path):  # the default
            return value
        if not str(value).strip():
            raise BtError(
                f"{option}: empty path; leave the option out, or name a folder (. for this one)"
            )
        return Path(value)

    return path


def runs_dir_option(help: str) -> Any:
    return typer.Option(
        Path("runs"), "--runs-dir", parser=path("--runs-dir"), metavar="<path>", help=help
    )


def problems_option() -> Any:
    return typer.Option(None, help="Only these problem ids (comma-separated).")


# `bt base` and `bt continue`: a run of phases (`bt sample` and a screen say theirs)
PHASES_DRY_RUN_HELP = (
    "Print the samples and tokens each phase would generate and an ETA from this machine's "
    "measured tokens/s; load no model, write nothing."
)


def dry_run_option(help: str = PHASES_DRY_RUN_HELP) -> Any:
    return typer.Option(False, "--dry-run", help=help)


def wait_option() -> Any:
    return typer.Option(
        0.0,
        "--wait",
        metavar="SECONDS",
        help="When another bt is writing the same run (it holds the run's lock), "
        "wait up to SECONDS for it to finish (default 0: refuse at once, "
        "naming its pid; at most 86,400).",
    )


def check_wait(wait: float) -> float:
    """--wait: a finite number of seconds in 0..86,400 (every wait has a bound)."""
    import math

    if not (math.isfinite(wait) and 0 <= wait <= 86400):
        raise BtError(f"--wait: expected seconds in 0..86400, got {wait}")
    return float(wait)


def json_option() -> Any:
    return typer.Option(
        False, "--json", help="Print one JSON document (machine-readable) instead of tables."
    )


def print_json(data: object) -> None:
    """`data` as one indented JSON document on stdout (paths as strings, non-ASCII kept), for
    `--json`: `json.loads` of the whole output gives it back."""
    import json

    typer.echo(json.dumps(data, indent=2, ensure_ascii=False, default=str))
