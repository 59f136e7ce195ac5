"""The routed plain queues' waiting counts reconciled with rq's lists when our processes read them (docs/fair-queue.md,
"Counts under rq's own commands"); a queue or job key past ``bound`` is not compared (approximate)."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Sequence
from typing import Any

from redis import Redis
from rq import Queue
from rq.job import Job

from fair_router.core.jobmeta import META_WAITING
from fair_router.core.keys import Keys
from fair_router.core.tenancy import DEFAULT_TENANT_MAX_BYTES, usable_tenant
from fair_router.core.text import as_text as _text
from fair_router.observe.waiting import field as waiting_field
from fair_router.observe.waiting import parse_field
from fair_router.store.scripts import RewaitScript, UnwaitScript

logger = logging.getLogger("fair_router")

MAX_REMEMBERED = 10_000
"""Listed ids found not routed (no count to give them), remembered so that a long-lived reader reads each once."""


class WaitingReconciler:
    """Reconciles the routed plain queues' waiting counts on one deployment's Redis (see the module
    docstring). ``connection``: our state (the counts); ``rq_connection``: rq's lists and jobs (on a cluster the
    owner of rq's slot, else the same)."""

    def __init__(self, connection: Redis, keys: Keys, rq_connection: Redis | None = None,
                 serializer: Any = None, bound: int = 1000, tenant_max_bytes: int = DEFAULT_TENANT_MAX_BYTES) -> None:
        self.connection, self.rq = connection, rq_connection or connection
        self.keys, self.serializer, self.bound = keys, serializer, bound
        self.tenant_max_bytes = tenant_max_bytes
        self._unwait, self._rewait = UnwaitScript(connection), RewaitScript(connection)
        self._not_routed: set[str] = set()
        self._warned = False

    def reconcile(self, job_keys: Iterable[str], queues: Iterable[str]) -> dict[str, bool]:
        """Make the counts of ``job_keys`` in the plain queues among ``queues`` (names; the fair ones left out by
        the caller) agree with rq's lists. Returns queue -> exact (False: beyond the bound) for each queue the
        job keys route into or count in."""
        job_keys, local = sorted(set(job_keys)), set(queues)
        if not job_keys:
            return {}
        with self.connection.pipeline(transaction=False) as pipe:
            for job_key in job_keys:
                pipe.hkeys(self.keys.routed(job_key))
                pipe.hkeys(self.keys.waiting(job_key)[0])
                pipe.hlen(self.keys.waiting(job_key)[1])
            replies = pipe.execute()
        targets: set[str] = set()
        for routed, fields in zip(replies[::3], replies[1::3], strict=True):
            targets.update(_text(queue) for queue in routed)
            targets.update(parse_field(_text(name))[0] for name in fields)
        names = sorted(targets & local)
        readable = [job_key for job_key, size in zip(job_keys, replies[2::3], strict=True) if int(size) <= self.bound]
        if not names:
            return {}
        counted = self._counted(readable)  # read before the lists: a job counted after them is not looked at
        listed = self._listed(names)
        all_read = len(readable) == len(job_keys)
        exact = {name: listed[name] is not None and all_read for name in names}
        unwait: dict[str, list[bytes]] = {}
        for digest, (job_key, name) in counted.items():
            ids = listed.get(name)
            if ids is not None and digest not in ids:
                unwait.setdefault(job_key, []).append(digest)
        uncounted = [job_id for name in names for digest, job_id in (listed[name] or {}).items()
                     if digest not in counted and job_id not in self._not_routed] if all_read else []
        rewait = self._fields(uncounted, names, set(job_keys))
        if unwait or rewait:
            with self.connection.pipeline(transaction=False) as pipe:
                for job_key, digests in unwait.items():
                    self._unwait.call(list(self.keys.waiting(job_key)), digests).queue(pipe)
                for job_key, taken in rewait.items():
                    self._rewait(self.keys.waiting(job_key), taken).queue(pipe)
                pipe.execute()
        return exact

    def _counted(self, job_keys: Sequence[str]) -> dict[bytes, tuple[str, str]]:
        """Digest -> (job key, queue) of every job counted waiting under ``job_keys``."""
        with self.connection.pipeline(transaction=False) as pipe:
            for job_key in job_keys:
                pipe.hgetall(self.keys.waiting(job_key)[1])
            replies = pipe.execute()
        return {bytes(digest): (job_key, parse_field(_text(name))[0])
                for job_key, jobs in zip(job_keys, replies, strict=True) for digest, name in jobs.items()}

    def _listed(self, names: Sequence[str]) -> dict[str, dict[bytes, str] | None]:
        """Queue -> (digest -> job id) of the ids on its list; None when it holds more than the bound."""
        with self.rq.pipeline(transaction=False) as pipe:
            for name in names:
                pipe.llen(Queue.redis_queue_namespace_prefix + name)
                pipe.lrange(Queue.redis_queue_namespace_prefix + name, 0, self.bound - 1)
            replies = pipe.execute()
        listed: dict[str, dict[bytes, str] | None] = {}
        for name, length, ids in zip(names, replies[::2], replies[1::2], strict=True):
            listed[name] = None if int(length) > self.bound else {Keys.member(_text(i)): _text(i) for i in ids}
        return listed

    def _fields(self, job_ids: Sequence[str], names: Sequence[str], job_keys: set[str]) -> dict[str, list[bytes]]:
        """Job key -> (digest, field) pairs, flat, for the listed jobs ``job_ids`` routed under one of
        ``job_keys`` into the queue their hash names (``origin``); the others are remembered as not routed."""
        if not job_ids:
            return {}
        fields: dict[str, list[bytes]] = {}
        try:
            jobs = Job.fetch_many(list(job_ids), connection=self.rq, serializer=self.serializer)
        except Exception as exc:  # a hash another serializer wrote: these ids stay uncounted, and it is said once
            if self._warned:
                return {}
            self._warned = True
            logger.warning("routed waiting counts: jobs %s cannot be read (%s); they are not counted waiting until "
                           "they can (give the reader the serializer the producers use)", ", ".join(job_ids[:5]), exc)
            return {}
        for job_id, job in zip(job_ids, jobs, strict=True):
            meta = (job.meta or {}) if job is not None else {}
            job_key, tenant = meta.get(META_WAITING), usable_tenant(meta, self.tenant_max_bytes, warn=False)
            if job is None or job_key not in job_keys or tenant is None or job.origin not in names:
                if len(self._not_routed) < MAX_REMEMBERED:
                    self._not_routed.add(job_id)
                continue
            fields.setdefault(str(job_key), []).extend(
                (Keys.member(job_id), waiting_field(job.origin, str(tenant)).encode()))
        return fields


def routed_job_keys(connection: Redis, keys: Keys, configured: Iterable[str]) -> list[str]:
    """The job keys whose counts readers show: those routers noted and those the settings give rules."""
    noted = connection.smembers(keys.observe_job_keys())
    return sorted({*(_text(key) for key in noted), *configured})

