"""`bt serve`: the local MLX engine behind vLLM's OpenAI-compatible API (a fleet member, or a
server for ordinary clients)."""

from __future__ import annotations

import typer


def serve(
    model: str | None = typer.Option(
        None, help="Model alias, local mlx-lm folder or hub id (default: the offline smollm2-135m)."
    ),
    host: str = typer.Option(
        "127.0.0.1",
        help="Interface to listen on. Loopback by default; "
        "another address (e.g. 0.0.0.0) lets other machines in and needs "
        "--allow-remote and an API key.",
    ),
    port: int = typer.Option(8000, help="TCP port (0: any free port; the URL is printed)."),
    batch_size: int = typer.Option(
        8,
        help="Rows generated together (continuous batching); "
        "reported to clients as the server's limit.",
    ),
    allow_remote: bool = typer.Option(
        False,
        "--allow-remote",
        help="Allow a --host other machines can reach (anything but "
        "127.0.0.0/8, ::1, localhost); refused without it, and "
        "without an API key.",
    ),
    api_key: str | None = typer.Option(
        None,
        "--api-key",
        metavar="KEY",
        envvar="BT_SERVE_API_KEY",
        show_envvar=True,
        show_default=False,
        help="Require `Authorization: Bearer KEY` on every request but "
        "/health (401 otherwise); clients pass --api-key or "
        "BT_API_KEY. Prefer the environment variable: a command "
        "line is visible to other users.",
    ),
    max_queue: int = typer.Option(
        64,
        "--max-queue",
        metavar="N",
        help="Requests accepted beyond the --batch-size rows being "
        "generated; more at once are answered 429 with "
        "Retry-After (bt's client retries them).",
    ),
    max_model_len: int = typer.Option(
        0,
        "--max-model-len",
        metavar="TOKENS",
        help="Longest prompt + max_tokens accepted (a longer request "
        "is a 400 naming the limit); 0: the model's context "
        "(max_position_embeddings).",
    ),
) -> None:
    """Serve the model over HTTP, to `bt ... --backend vllm --endpoint URL` and OpenAI clients.

    /v1/completions (token ids or text), /v1/chat/completions (the model's chat template),
    /tokenize, /detokenize; per-request seeds (the local MLX backend's tokens exactly), stop
    strings, top-20 log-probs, bt's exact entropies as an extra field, one prefill per cell.
    A client that disconnects stops its generation. One line per request on stderr. Ctrl-C
    stops."""
    import sys

    from breakthrough.models.registry import OFFLINE_DEFAULT
    from breakthrough.serve.app import serve as run_server

    run_server(
        model or OFFLINE_DEFAULT,
        host=host,
        port=port,
        batch_size=batch_size,
        announce=lambda line: print(line, file=sys.stderr, flush=True),
        allow_remote=allow_remote,
        api_key=api_key,
        max_queue=max_queue,
        max_model_len=max_model_len,
    )


def register(app: typer.Typer) -> None:
    app.command("serve", short_help="Serve a model over HTTP for --backend vllm.")(serve)
