"""How a weighted worker is put together from its arguments and settings (the weights checked, the queues on rq's
slot of a cluster or built as FairQueues, the job-start gate on its own pool), and its warnings at start."""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial
from typing import TYPE_CHECKING, Any

from pydantic import TypeAdapter
from redis import ConnectionPool, Redis
from redis.exceptions import RedisError
from rq import Queue

from fair_router.config.errors import validated
from fair_router.controls.gate import TenantGate
from fair_router.controls.orgs import OrgBook
from fair_router.controls.ratelimit import RateLimiter
from fair_router.controls.tiers import TierBook
from fair_router.core.keys import Keys
from fair_router.core.shards import family_of
from fair_router.core.validation import QueueName, QueueWeight, Weight
from fair_router.fairqueue.combined import as_fair
from fair_router.fairqueue.queue import FairQueue
from fair_router.store.cluster import is_rq_slot_client, pair_of, state_of
from fair_router.store.outage import redis_address
from fair_router.store.serverconf import policy_readings
from fair_router.workers.limiter import ConcurrencyLimiter, WorkerGate
from fair_router.workers.pool import redact_url

if TYPE_CHECKING:
    from fair_router.config.settings import Settings

_WEIGHTS: TypeAdapter[dict[str, QueueWeight]] = TypeAdapter(dict[QueueName, Weight])


def validate_weights(weights: Mapping[str, object], source: str = "weights=") -> dict[str, QueueWeight]:
    """Check an explicit queue -> weight mapping with the same types as the ``queues:`` setting, once, when the worker
    is built (the fetch order trusts them). Raises SettingsError naming each bad queue, its value and the reason."""
    return validated(_WEIGHTS, dict(weights), source)


def weight_of(configured: Mapping[str, QueueWeight], queue: str) -> QueueWeight | None:
    """The configured weight of ``queue``, else of its family when it is a shard queue, else None."""
    if queue in configured:
        return configured[queue]
    member = family_of(queue)
    return configured.get(member[0]) if member else None


def on_rq_slot(queues: Any, kwargs: dict[str, Any]) -> Any:
    """redis_cluster on: the worker's connection (rq's CLI builds it from ``--url``, any node) replaced by the
    plain client to the owner of rq's slot, for the worker and the Queue objects rq built on it."""
    given = kwargs.get("connection")
    if given is None:
        raise ValueError("redis_cluster is on: the worker needs a connection (rq's --url) to seed the cluster")
    rq = pair_of(given, cluster=True).rq
    kwargs["connection"] = rq
    items = [queues] if isinstance(queues, (str, Queue)) else list(queues)
    for item in items:
        if isinstance(item, Queue):
            item.connection = rq
    return items


def with_fair_queues(queues: Any, settings: Settings, kwargs: dict[str, Any]) -> list[Any]:
    """The worker's queues with each one named in ``fair_queues`` built as a FairQueue (names, and Queue objects of any
    class: :func:`~fair_router.fairqueue.combined.as_fair`, which raises QueueClassConflict)."""
    items = [queues] if isinstance(queues, (str, Queue)) else list(queues)
    built: list[Any] = []
    for item in items:
        if isinstance(item, str) and settings.is_fair(item):
            item = FairQueue(item, connection=kwargs.get("connection"), serializer=kwargs.get("serializer"),
                             settings=settings)
        elif isinstance(item, Queue) and settings.is_fair(item.name):
            item = as_fair(item, settings)  # any Queue class (django-rq's, --queue-class): Fair<Class>
        built.append(item)
    return built


def build_gate(connection: Redis, settings: Settings) -> WorkerGate:
    """The job-start checks, with a limiter on its own connection pool: its lease-refresh thread never shares a socket
    (or a pool lock, across the work-horse fork) with rq's own use of the worker's connection."""
    own: Any
    if settings.shard_urls:  # a shard's worker: its queues are on the shard's Redis, leases stay on redis_url
        own = Redis.from_url(settings.redis_url)
    elif is_rq_slot_client(connection):  # a cluster: leases and rates on the RedisCluster
        own = state_of(connection)
    else:
        pool = connection.connection_pool  # same connection class: TLS, a unix socket, a Sentinel-managed primary
        own = Redis(connection_pool=ConnectionPool(connection_class=pool.connection_class, **pool.connection_kwargs))
    keys = Keys(settings.prefix)
    tiers = TierBook(own, keys, settings.tiers, orgs=settings.orgs)
    limiter = ConcurrencyLimiter(own, keys, tiers, settings.concurrency)
    orgs = OrgBook(own, keys)
    limiter.org_profile = partial(orgs.profile, configured=settings.orgs, tiers=settings.tiers)
    return TenantGate(limiter, RateLimiter(keys, settings.jobs), slots=settings.concurrency.enabled)


def warn_unserved_rule_queues(worker: Any) -> None:
    """Log, once at start, the queues the settings' rules route to that the worker leaves out, when no ``pool:`` says
    which workers serve them."""
    served = {queue.name for queue in worker.queues}
    missing = sorted({queue for key, queue in worker.settings.queue_targets() if ".rules[" in key} - served)
    if missing and not worker.settings.pool:
        worker.log.warning("Worker %s: the settings' rules route jobs to %s, which this worker does not serve: "
                           "throttled jobs wait there until a worker does (start one on them, or add them to this "
                           "worker's queues)", worker.name, ", ".join(missing))


def warn_about_server_settings(worker: Any) -> None:
    """Log, once at start, each server the worker writes to (one ``INFO memory`` each) whose ``maxmemory-policy``
    may evict keys or does not say, with the fix."""
    for reading in policy_readings([worker.connection, worker.state_connection, worker.gate.limiter.connection]):
        if not reading.safe:
            worker.log.warning("Worker %s: %s", worker.name, reading.describe())


def warn_about_other_redis(worker: Any) -> None:
    """Log, once at start, a worker on another Redis server (``run_id``) or database than the settings' ``redis_url``,
    where ``@fair_job`` enqueues and the commands keep tenant controls."""
    settings = worker.settings
    if "redis_url" not in settings.model_fields_set or settings.shard_urls or settings.redis_cluster:
        return  # no redis_url given (producers then pass their own connection), or queues on other servers by design
    other = Redis.from_url(settings.redis_url, socket_connect_timeout=2, socket_timeout=2)  # connects when used
    ours, theirs = worker.connection.connection_pool.connection_kwargs, other.connection_pool.connection_kwargs
    same_db = int(ours.get("db") or 0) == int(theirs.get("db") or 0)
    if same_db and all(ours.get(key) == theirs.get(key) for key in ("host", "port", "path")):
        other.close()
        return
    try:
        same_server = other.info("server")["run_id"] == worker.connection.info("server")["run_id"]
    except RedisError as exc:
        same_server, why = False, f"which this worker cannot reach ({type(exc).__name__}: {exc})"
    else:
        why = "another server" if not same_server else "another database"
    finally:
        other.close()
    if same_server and same_db:
        return
    url = redact_url(settings.redis_url)
    worker.log.warning("Worker %s: serves Redis %s, but the settings' redis_url is %s (%s), where @fair_job enqueues "
                       "and fair-router's commands set tenant controls: jobs enqueued there never reach this worker. "
                       "Serve that Redis (rq worker --url %s; django-rq: the queues' RQ_QUEUES entries), or set "
                       "redis_url to this worker's Redis",
                       worker.name, redis_address(worker.connection), url, why, url)
