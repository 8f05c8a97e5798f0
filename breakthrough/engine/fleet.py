"""Cell-affine routing over several endpoints: rendezvous (highest-random-weight) hashing.

Every request of a cell is routed by the cell id (`contract.route_key`): each live endpoint gets
the score sha256(endpoint url, cell id) and the highest wins. So all probes, refinements,
restarts, top-ups and answer phases of one cell reach the same server and hit its prefix cache;
when an endpoint dies only its own cells move (each to its next-highest endpoint), the others
keep their server and their cache; and routing needs no shared state: any process given the
same endpoint list routes the same way."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Sequence

from breakthrough.engine.http_client import Endpoint


def rendezvous_score(endpoint_url: str, key: str) -> int:
    digest = hashlib.sha256(f"{endpoint_url}\x00{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big")


def rendezvous_order(urls: Sequence[str], key: str) -> list[str]:
    """`urls` by preference for `key`, best first."""
    return sorted(urls, key=lambda u: (-rendezvous_score(u, key), u))


class Fleet:
    """The endpoints of one engine; routes keys to live endpoints and forgets dead ones."""

    def __init__(self, endpoints: Sequence[Endpoint]) -> None:
        self.endpoints = list(endpoints)
        self._by_url = {e.url: e for e in self.endpoints}
        self._lock = threading.Lock()
        self.rerouted_cells: set[str] = set()
        self.notes: list[str] = []

    def alive(self) -> list[Endpoint]:
        return [e for e in self.endpoints if e.alive]

    def route(self, key: str) -> Endpoint | None:
        """The live endpoint that serves `key`'s cell (None when none is alive)."""
        live = [e.url for e in self.endpoints if e.alive]
        if not live:
            return None
        best = rendezvous_order(live, key)[0]
        if best != rendezvous_order([e.url for e in self.endpoints], key)[0]:
            with self._lock:
                self.rerouted_cells.add(key)
        return self._by_url[best]

    def mark_dead(self, endpoint: Endpoint, why: str) -> None:
        with self._lock:
            if endpoint.alive:
                endpoint.alive = False
                self.notes.append(
                    f"{endpoint.url} stopped answering ({why}); its cells move "
                    "to the other endpoints"
                )

    def capacity(self) -> int:
        return sum(e.max_inflight for e in self.alive()) or 1

    def close(self) -> None:
        for e in self.endpoints:
            e.close()
