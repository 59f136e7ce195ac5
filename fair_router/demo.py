"""``fair-router demo``: a greedy tenant and two small ones enqueue; see where each job went.

Runs on ``$REDIS_URL`` / ``$FAIR_ROUTER_REDIS_URL`` when set, else on a private redis-server.
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager

import click
from redis import Redis

from fair_router.decorator import fair_job
from fair_router.redis_server import RedisServer
from fair_router.router import FairRouter
from fair_router.rules import Rule

DEMO_PREFIX = "fair_router_demo"
DEMO_RULES = [
    Rule(queue="demo_throttled", threshold=10, per="1m"),
    Rule(queue="demo_superslow", threshold=20, per="10s"),
]
DEMO_QUEUES = ["demo", "demo_throttled", "demo_superslow"]


def work(account: str, item: int) -> int:
    """The demo's job: trivial on purpose, the routing is what is shown."""
    return item


@contextmanager
def demo_redis() -> Iterator[Redis]:
    """The user's Redis if REDIS_URL/FAIR_ROUTER_REDIS_URL is set, else a private redis-server."""
    url = os.environ.get("FAIR_ROUTER_REDIS_URL") or os.environ.get("REDIS_URL")
    if url:
        click.echo(f"using Redis at {url}")
        yield Redis.from_url(url)
        return
    with RedisServer() as server:
        click.echo(f"started redis-server {server.binary} on port {server.port}")
        yield server.client()


def run_routing_demo(connection: Redis) -> dict[str, Counter[str]]:
    """Enqueue 30 jobs for a greedy tenant and 3 each for two small ones; return tenant -> queue counts."""
    router = FairRouter(connection, prefix=DEMO_PREFIX)
    job = fair_job("demo", rules=DEMO_RULES, tenant=lambda account, item: account, router=router)(work)
    placed: dict[str, Counter[str]] = {}
    schedule = [("greedy-co", i) for i in range(30)] + [(t, i) for i in range(3) for t in ("small-a", "small-b")]
    for account, item in schedule:
        placed.setdefault(account, Counter())[job.delay(account, item).origin] += 1
    for name in DEMO_QUEUES:
        router.queue(name).empty()  # type: ignore[no-untyped-call]
    return placed


def print_routing(placed: dict[str, Counter[str]]) -> None:
    """Print a tenant x queue table."""
    click.echo("rules: " + "; ".join(rule.describe() for rule in DEMO_RULES))
    header = f"{'tenant':<12}" + "".join(f"{q:>16}" for q in DEMO_QUEUES)
    click.echo(header)
    click.echo("-" * len(header))
    for tenant, counts in placed.items():
        click.echo(f"{tenant:<12}" + "".join(f"{counts[q]:>16}" for q in DEMO_QUEUES))
