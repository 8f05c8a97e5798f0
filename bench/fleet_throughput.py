"""Fleet throughput: the same work through 1 and through 2 `bt serve` endpoints, as a ratio.

Work: `--cells` base-trace-like requests (each its own cell, so the fleet spreads them by
rendezvous hashing), a chat-sized prompt, `--tokens` generated tokens each, the protocol's
sampling; sent through `HttpEngine` (`--backend vllm`) exactly as `bt base` sends them. The
servers are `bt serve` processes of one model folder on loopback ports, started once and kept
for all repeats; repeats alternate 1-endpoint / 2-endpoint runs so machine load hits both alike.
Prints generated tok/s of each, the ratio per repeat and the median, and checks that both give
the same tokens. On one machine the two servers share its cores, so the ratio measures how much
of the machine one server leaves idle (on a 2-core CPU little); across machines it approaches
the number of endpoints when the cells outnumber them.

    .venv/bin/python bench/fleet_throughput.py  # tiny random model (4 layers, 128 wide)
    .venv/bin/python bench/fleet_throughput.py --model smollm2-135m --tokens 64
"""

from __future__ import annotations

import argparse
import os
import selectors
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

BT = str(Path(sys.executable).parent / "bt")


def start_server(model: str, batch_size: int) -> tuple[subprocess.Popen, str]:
    """A `bt serve` on a free loopback port; (process, URL) once it listens."""
    proc = subprocess.Popen(
        [BT, "serve", "--model", model, "--port", "0", "--batch-size", str(batch_size)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        if sel.select(timeout=1.0):
            line = proc.stderr.readline()
            if not line:
                raise SystemExit(f"bt serve exited with {proc.wait()}")
            if line.startswith("bt serve:") and "http://" in line:
                threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
                return proc, "http://" + line.split("http://", 1)[1].split(";", 1)[0].split()[0]
    os.kill(proc.pid, signal.SIGKILL)
    raise SystemExit("bt serve did not start in 180 s")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()


def run(urls: list[str], loaded, cells: int, tokens: int, inflight: int) -> tuple[float, dict]:
    from breakthrough.engine.contract import GenRequest
    from breakthrough.engine.http_backend import HttpEngine
    from breakthrough.models.families import build_prompt_ids
    from breakthrough.protocol import DEFAULT

    eng = HttpEngine(
        "vllm",
        urls,
        loaded.eos_ids,
        int(loaded.config.get("vocab_size") or len(loaded.tokenizer)),
        max_inflight=inflight,
    )
    reqs = []
    for i in range(cells):
        prompt = build_prompt_ids(
            loaded.tokenizer, loaded.family, f"Problem {i}: what is {i} + {2 * i + 1}?"
        )
        reqs.append(
            GenRequest(
                key=f"bench:p{i}",
                prompt=prompt,
                max_tokens=tokens,
                seed=11 + i,
                sampling=DEFAULT.sampling,
            )
        )
    t0 = time.perf_counter()
    out = {r.key: r for r in eng.generate(reqs)}
    elapsed = time.perf_counter() - t0
    errors = [r.error for r in out.values() if r.finish_reason == "error"]
    if errors:
        raise SystemExit(f"errors: {errors[:3]}")
    n = sum(len(r.tokens) for r in out.values())
    eng.close()
    return n / elapsed, {k: r.tokens for k, r in out.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--model", default="tiny", help="'tiny' (built here) or an alias / mlx-lm folder"
    )
    ap.add_argument("--cells", type=int, default=16)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument(
        "--batch-size", type=int, default=8, help="rows per server (bt serve --batch-size)"
    )
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    from breakthrough.models.loading import load_model

    with tempfile.TemporaryDirectory() as tmp:
        model = args.model
        if model == "tiny":
            # tests/models/tiny.py
            sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
            from models.tiny import write_tiny_model

            from breakthrough.models.offline import tokenizer_from_gguf

            model = str(
                write_tiny_model(
                    Path(tmp) / "tiny",
                    tokenizer_from_gguf(),
                    layers=4,
                    hidden=128,
                    heads=4,
                    kv_heads=2,
                    intermediate=256,
                )
            )
        loaded = load_model(model)
        servers = [start_server(model, args.batch_size) for _ in range(2)]
        try:
            urls = [u for _, u in servers]
            print(
                f"model {loaded.alias}; {args.cells} cells x {args.tokens} tokens; servers {urls}; "
                f"{os.cpu_count()} CPUs"
            )
            run(urls, loaded, 2, 4, args.batch_size)  # warm both servers
            ratios = []
            for rep in range(args.repeats):
                one, tok1 = run(urls[:1], loaded, args.cells, args.tokens, args.batch_size)
                two, tok2 = run(urls, loaded, args.cells, args.tokens, args.batch_size)
                same = "same tokens" if tok1 == tok2 else "TOKENS DIFFER"
                ratios.append(two / one)
                print(
                    f"repeat {rep + 1}: 1 endpoint {one:8.1f} tok/s   "
                    f"2 endpoints {two:8.1f} tok/s   ratio {two / one:5.2f}   ({same})"
                )
            print(f"median ratio (2 endpoints / 1): {statistics.median(ratios):.2f}")
        finally:
            for proc, _ in servers:
                stop(proc)


if __name__ == "__main__":
    main()
