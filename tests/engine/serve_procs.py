"""`bt serve` processes for tests: started through the installed console script on a free
loopback port (--port 0; the URL is read from its first line), waited for with a deadline,
stopped by PID (SIGINT, then SIGKILL if it lingers)."""

from __future__ import annotations

import json
import os
import selectors
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

BT = str(Path(sys.executable).parent / "bt")
START_DEADLINE_S = 120.0


@dataclass
class ServeProc:
    proc: subprocess.Popen
    url: str
    log: list[str] = field(default_factory=list)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def get_json(self, path: str, headers: dict[str, str] | None = None) -> dict:
        req = urllib.request.Request(self.url + path, headers=headers or {})
        with urllib.request.urlopen(req, timeout=10) as resp:  # loopback only
            return json.loads(resp.read())

    def metrics(self, headers: dict[str, str] | None = None) -> dict[str, float]:
        """/metrics as {name: value}."""
        req = urllib.request.Request(self.url + "/metrics", headers=headers or {})
        with urllib.request.urlopen(req, timeout=10) as resp:
            return {
                k: float(v) for k, v in (line.split() for line in resp.read().decode().splitlines())
            }

    def kill(self) -> None:
        """SIGKILL: the server dies mid-request, as a crashed machine would."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGINT)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)


def _start(
    model_dir: Path,
    batch_size: int,
    extra: tuple[str, ...] = (),
    env_extra: dict[str, str] | None = None,
) -> ServeProc:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", **(env_extra or {})}
    proc = subprocess.Popen(
        [
            BT,
            "serve",
            "--model",
            str(model_dir),
            "--port",
            "0",
            "--batch-size",
            str(batch_size),
            *extra,
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    sel = selectors.DefaultSelector()
    sel.register(proc.stderr, selectors.EVENT_READ)
    deadline = time.monotonic() + START_DEADLINE_S
    seen = []
    try:
        while time.monotonic() < deadline:
            if not sel.select(timeout=max(0.0, deadline - time.monotonic())):
                continue
            line = proc.stderr.readline()
            if not line:
                raise RuntimeError(
                    f"bt serve exited ({proc.wait(timeout=10)}): {''.join(seen)[-2000:]}"
                )
            seen.append(line)
            if line.startswith("bt serve:") and "http://" in line:
                url = line.split("http://", 1)[1].split(";", 1)[0].split()[0]
                sp = ServeProc(proc, "http://" + url, seen)
                threading.Thread(target=sp.log.extend, args=(proc.stderr,), daemon=True).start()
                return sp
        raise RuntimeError(
            f"bt serve did not start within {START_DEADLINE_S:.0f}s: {''.join(seen)[-2000:]}"
        )
    except BaseException:
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        raise
    finally:
        sel.close()


@contextmanager
def bt_serve(
    model_dir: Path,
    n: int = 1,
    batch_size: int = 4,
    extra: tuple[str, ...] = (),
    env: dict[str, str] | None = None,
):
    """`n` bt serve processes of `model_dir` (`extra` options, `env` added to the environment);
    yields their ServeProcs; always stops them."""
    procs: list[ServeProc] = []
    try:
        for _ in range(n):
            procs.append(_start(model_dir, batch_size, extra, env))
        yield procs
    finally:
        for p in procs:
            p.stop()
