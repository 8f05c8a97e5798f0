"""`bt serve`: the local MLX engine behind a vLLM-style `/v1/completions` (a fleet member)."""

from __future__ import annotations

import typer


def serve(
    model: str = typer.Option(None, help="Model alias, local mlx-lm folder or hub id (default: the "
                              "offline smollm2-135m)."),
    host: str = typer.Option("127.0.0.1", help="Interface to listen on. Loopback by default; give "
                             "another address (e.g. 0.0.0.0) only to let other machines in."),
    port: int = typer.Option(8000, help="TCP port (0: any free port; the URL is printed)."),
    batch_size: int = typer.Option(8, help="Rows generated together (continuous batching); "
                                   "reported to clients as the server's limit."),
) -> None:
    """Serve the model to `bt base|continue --backend vllm --endpoint URL[,URL...]`.

    Token-id prompts, per-request seeds (the local MLX backend's tokens exactly), top-20
    log-probs, bt's exact entropies as an extra field, one prefill per cell. Ctrl-C stops."""
    import sys

    from breakthrough.engine.serve import serve as run_server
    from breakthrough.models.registry import OFFLINE_DEFAULT

    run_server(model or OFFLINE_DEFAULT, host=host, port=port, batch_size=batch_size,
               announce=lambda line: print(line, file=sys.stderr, flush=True))


def register(app: typer.Typer) -> None:
    app.command("serve")(serve)
