"""Importable job functions for the shard tests and bench/shards.py (rq resolves jobs by dotted path)."""

from __future__ import annotations

import time


def work(tenant: str, seconds: float = 0.0) -> str:
    """Stands for one job of ``tenant`` that takes ``seconds``."""
    time.sleep(seconds)
    return tenant
