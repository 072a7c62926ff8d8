"""`python -m tools.bench peers` (`make bench-peers`): graphserve's graph server against the
servers a user would pick instead, on the same SavedModel, and against the in-process limit. See
run.py."""

from __future__ import annotations

import importlib

from tools.bench.peers.base import Peer

__all__ = ["PEER_NAMES", "load_peer"]

PEER_NAMES = ("kserve", "bentoml", "litserve", "pytriton", "fastapi")


def load_peer(name: str) -> Peer:
    """The PEER declared in tools/bench/peers/<name>.py."""
    if name not in PEER_NAMES:
        raise ValueError(f"unknown peer {name!r}: expected some of {', '.join(PEER_NAMES)}")
    peer: Peer = importlib.import_module(f"tools.bench.peers.{name}").PEER
    return peer
