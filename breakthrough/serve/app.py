"""`bt serve` itself: options checked and the socket bound before the model loads, then the
application (`routes.build_app`) served by uvicorn until interrupted."""

from __future__ import annotations

import socket
from collections.abc import Callable

from breakthrough.errors import BtError
from breakthrough.protocol import MAX_TOKENS
from breakthrough.serve.auth import check_access, is_loopback
from breakthrough.serve.generation import MAX_QUEUE


def listening_socket(host: str, port: int) -> socket.socket:
    """A bound, listening TCP socket (port 0: any free port); one-line BtError when the address
    cannot be used."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise BtError(
            f"--host/--port: cannot listen on {host}:{port} ({exc.strerror or exc})"
        ) from None
    sock.listen(2048)
    return sock


def check_model_len(max_model_len: int, loaded) -> None:
    """--max-model-len within the model's context (max_position_embeddings), when it says one:
    a longer limit would accept requests the model cannot attend over."""
    ctx = loaded.config.get("max_position_embeddings")
    if max_model_len and isinstance(ctx, int) and max_model_len > ctx:
        raise BtError(
            f"--max-model-len: {max_model_len:,} is beyond {loaded.alias}'s "
            f"{ctx:,}-token context (max_position_embeddings); use at most {ctx:,}, "
            "or 0 for the whole context"
        )


def serve(
    model: str,
    host: str = "127.0.0.1",
    port: int = 8000,
    batch_size: int = 8,
    announce: Callable[[str], None] = print,
    *,
    allow_remote: bool = False,
    api_key: str | None = None,
    max_queue: int = MAX_QUEUE,
    max_model_len: int = 0,
) -> None:
    """Load `model`, listen on host:port and serve until interrupted. `announce(line)` gets the
    URL once the socket listens (before that, connections wait in the backlog), then one line
    per request. Every option is checked, and the socket bound, before the model loads."""
    import uvicorn

    from breakthrough.engine.contract import check_batch_size
    from breakthrough.models.loading import load_model
    from breakthrough.serve.generation import MlxServer
    from breakthrough.serve.routes import build_app

    check_batch_size(batch_size)
    if not 0 <= port <= 65535:
        raise BtError(f"--port: {port} is not a TCP port")
    if max_queue < 0:
        raise BtError(f"--max-queue: expected 0 or a positive integer, got {max_queue}")
    if not 0 <= max_model_len <= MAX_TOKENS:
        raise BtError(
            f"--max-model-len: expected 0 (the model's context) or a positive integer "
            f"<= {MAX_TOKENS:,}, got {max_model_len:,}"
        )
    check_access(host, allow_remote, api_key)
    sock = listening_socket(host, port)  # before loading: a taken port fails at once
    try:
        loaded = load_model(model)
        check_model_len(max_model_len, loaded)
        server = MlxServer(loaded, batch_size=batch_size, max_queue=max_queue)
        app = build_app(server, model, api_key=api_key, max_model_len=max_model_len, log=announce)
        bound = sock.getsockname()[1]
        shown = f"[{host}]" if ":" in host else host
        where = "" if is_loopback(host) else " (reachable from other machines)"
        where += "; bearer token required" if api_key else ""
        announce(f"bt serve: {loaded.alias} at http://{shown}:{bound}{where}; Ctrl-C stops")
        config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
        uvicorn.Server(config).run(sockets=[sock])
    finally:
        sock.close()
