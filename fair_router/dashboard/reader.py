"""One bounded read of everything the views show: :meth:`SnapshotReader.snapshot` (docs/observability.md, "Cost
of a page load"); tenants beyond the top N summed into ``_other``."""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Iterable, Sequence
from typing import Any
from urllib.parse import unquote

from redis import Redis
from redis.exceptions import NoPermissionError, ReadOnlyError, ResponseError
from rq import Queue

from fair_router.config.settings import Settings, TiersConfig
from fair_router.controls.fairstate import TENANT_FIELD, record_weight
from fair_router.controls.tiers import load_resolver
from fair_router.core.keys import Keys
from fair_router.core.rules import last_match
from fair_router.core.text import as_text
from fair_router.dashboard.iterations import running_iterations
from fair_router.dashboard.model import OTHER_LABEL, Snapshot, TenantView, WaitFigures
from fair_router.dashboard.orgread import org_figures
from fair_router.dashboard.queueread import PER_QUEUE, ShardQueues, parse_queue, queue_commands
from fair_router.fairqueue.queue import FairQueue
from fair_router.fairqueue.reconcile import RECONCILE_BOUND, FairQueues, reconcile_queues
from fair_router.observe.buckets import Histogram, from_fields
from fair_router.observe.counters import counter_table
from fair_router.observe.events import parse_events
from fair_router.observe.recorder import ALL, NO_TENANT, OTHER, TICK_SECONDS, TICK_SLOTS
from fair_router.observe.waitcheck import WaitingReconciler
from fair_router.observe.waiting import parse_field
from fair_router.store.cluster import rq_of
from fair_router.store.scripts import Clock, PeekScript

logger = logging.getLogger("fair_router")

RECENT_WINDOW = 120.0
"""Seconds since a tenant's last admission (first start of a minute) for it to count as recently started."""


def display_name(key: str) -> str:
    """A tenant as shown, from its encoded form (a digest stays a shortened digest)."""
    if key == NO_TENANT:
        return "(no tenant)"
    if key.startswith("#"):
        return key[:13] + "…"
    return unquote(key)


def _ints(raw: dict[Any, Any]) -> dict[str, int]:
    return {as_text(k): int(float(v)) for k, v in raw.items()}


class SnapshotReader:
    """Reads a :class:`Snapshot` from Redis for one deployment's settings (prefix, queues, tiers, limits)."""

    def __init__(self, connection: Redis, settings: Settings, queues: Sequence[str] | None = None,
                 clock: Clock | None = None) -> None:
        """``queues``: those to show (default: the settings' and rq's); ``clock``: instead of Redis ``TIME``."""
        self.connection = connection
        self.rq = rq_of(connection)  # rq's keys: the same client, or on a cluster the owner of rq's slot
        self.settings = settings
        self.keys = Keys(settings.prefix)
        self.queues = list(queues) if queues is not None else None
        self.clock = clock
        self.top_n = settings.observe.top_tenants
        self._peek = PeekScript(connection)
        self._resolver = load_resolver(settings.tiers.resolver) if settings.tiers.resolver else None
        self._rules = {key: job.rules for key, job in settings.jobs.items() if job.rules}
        self._shards = ShardQueues(settings, self.keys)
        self.reconcile_bound = RECONCILE_BOUND
        self._warned = False
        self._waiting = WaitingReconciler(connection, self.keys, self.rq, bound=RECONCILE_BOUND,
                                          tenant_max_bytes=settings.tenant_max_bytes)
        self._fair = FairQueues(self.rq, settings)

    def snapshot(self) -> Snapshot:
        """Read everything the views show (a few pipelined round trips, see the module docstring)."""
        keys, n = self.keys, self.top_n
        apart = self.rq is not self.connection  # a cluster: TIME (no key) cannot ride a cluster pipeline
        with self.connection.pipeline(transaction=False) as pipe:
            if not apart:
                pipe.time()
            pipe.smembers(Queue.redis_queues_keys)
            pipe.zrevrange(keys.observe_recent(), 0, 2 * n - 1, withscores=True)
            pipe.hgetall(keys.observe_events())
            pipe.hgetall(keys.limit_stats())
            pipe.smembers(keys.observe_job_keys())
            pipe.hgetall(keys.observe_record(ALL))
            pipe.hgetall(keys.observe_record(OTHER))
            replies = pipe.execute()
        if apart:
            replies.insert(0, self.rq.time() if self.clock is None else None)
        server_time, rq_queues, recent, events, limits, job_keys, everyone, other = replies
        now = self.clock() if self.clock is not None else int(server_time[0]) + int(server_time[1]) / 1e6
        names = self._queue_names(as_text(key).removeprefix(Queue.redis_queue_namespace_prefix) for key in rq_queues)
        routed_keys = sorted({*map(as_text, job_keys), *self._rules})
        approximate = self._reconcile(names, routed_keys)

        with self.connection.pipeline(transaction=False) as pipe:
            for name in names:
                queue_commands(pipe, self.connection, keys, name, now)
            for job_key in routed_keys:
                pipe.hgetall(keys.routed(job_key))
                pipe.hgetall(keys.waiting(job_key)[0])
            replies = pipe.execute()
        reads = [parse_queue(self.settings, name, replies[PER_QUEUE * i: PER_QUEUE * (i + 1)])
                 for i, name in enumerate(names)]
        for read in reads:
            read.view.approximate = read.view.name in approximate
        shard_servers, shard_reads = self._shards.read(now)
        every = [*reads, *shard_reads]
        queues = [read.view for read in every]
        backlogs = {read.view.name: read.backlog for read in every if read.backlog is not None}
        parked = {read.view.name: read.parked for read in every if read.backlog is not None}
        abandoned_by_queue = {read.view.name: read.abandoned for read in every if read.abandoned is not None}
        routed_replies = replies[PER_QUEUE * len(names):]
        routed = {(job_key, queue): count for job_key, raw in zip(routed_keys, routed_replies[::2], strict=True)
                  for queue, count in _ints(raw).items()}
        lengths = {queue.name: queue.jobs for queue in queues if not queue.down}
        waiting = {**plain_waiting(routed_replies[1::2], lengths), **backlogs}  # queue -> tenant -> jobs

        waiting_total: Counter[str] = sum(map(Counter, waiting.values()), Counter())
        recently = [as_text(t) for t, score in recent if score / 1000 >= now - RECENT_WINDOW]
        by_waiting = sorted(waiting_total, key=lambda t: -waiting_total[t])[: 2 * n]
        candidates = list(dict.fromkeys([*by_waiting, *recently]))
        records = self._candidates(candidates, now, waiting, parked)
        limits_on = self.settings.concurrency.enabled
        records.sort(key=lambda pair: (-(pair[0].waiting_total + (pair[0].running or 0)), -pair[0].wait_5m.starts))
        top = [row for row, _ in records[:n]]
        self._add_rules(top, now)

        all_fields = _ints(everyone)
        everyone_row = _row(ALL, "everyone", all_fields, now)
        fair_weights = self._fair_weights(backlogs)
        for row in top:
            row.share_5m = row.wait_5m.starts / everyone_row.wait_5m.starts if everyone_row.wait_5m.starts else None
            row.alone = bool(row.waiting) and all(len(waiting[queue]) == 1 for queue in row.waiting)
            if row.key in fair_weights and not row.alone:  # alone, a tenant shares with nobody: no mark
                row.fair_share = fair_weights[row.key] / sum(fair_weights.values())
        orgs = org_figures(every, n, display_name)  # with orgs, fair shares have two levels (dashboard/orgread.py)
        orgs.apply(top, display_name)
        if limits_on:
            self._add_org_slots(top, orgs.tenant_org, now)
        total_running = sum(queue.running for queue in queues)
        other_row = _rest(everyone_row, all_fields, records[:n], now, waiting, total_running if limits_on else None)
        capped = _window(_ints(other), int(now // 60), 5).count
        counted = parse_events(events) | {("abandoned", name): count for name, count in abandoned_by_queue.items()}
        return Snapshot(now, n, limits_on, queues, top, other_row, everyone_row, routed,
                        counter_table(_ints(limits)), counted, TICK_SECONDS, capped,
                        running_iterations(self.rq, [queue.name for queue in queues
                                                             if queue.running and not queue.server],
                                           tenant_max_bytes=self.settings.tenant_max_bytes),
                        shard_servers, tiers_named=self.settings.tiers != TiersConfig() or any(
                            row.tier != self.settings.tiers.default for row in top), orgs=orgs.orgs,
                        other_orgs=orgs.other)

    # -- steps ----------------------------------------------------------------------------------------

    def _reconcile(self, names: list[str], routed_keys: list[str]) -> set[str]:
        """:func:`reconciled` counts, or every queue approximate where this connection may not write."""
        self._waiting.bound = self.reconcile_bound
        try:
            return reconciled(self._fair.among(names), self._waiting, names, routed_keys, self.reconcile_bound)
        except (ReadOnlyError, NoPermissionError, ResponseError) as exc:  # a replica, or a user without EVAL
            text = str(exc).lower()  # a ResponseError: Redis refused a write or a script here, or failed?
            if not isinstance(exc, ReadOnlyError | NoPermissionError) and not any(
                    sign in text for sign in ("noperm", "readonly", "read only", "no permissions")):
                raise
            if not self._warned:
                self._warned = True
                logger.warning("the dashboard cannot reconcile waiting counts with rq's lists (%s): counts are shown "
                               "as stored, approximate after rq's own cancels, deletes and requeues; give it a "
                               "connection to the primary, allowed EVAL/EVALSHA", exc)
            return set(names)

    def _queue_names(self, known: Iterable[str]) -> list[str]:
        if self.queues is not None:
            return list(self.queues)
        listed = [*self.settings.queues, *self.settings.fair_queues]
        names = dict.fromkeys([*listed, *sorted(set(known) - set(listed))])
        return [name for name in names if name not in self._shards.names]  # those are read on their servers

    def _candidates(self, candidates: list[str], now: float, backlogs: dict[str, dict[str, int]],
                    parked: dict[str, set[str]]) -> list[tuple[TenantView, dict[str, int]]]:
        """Each candidate's row (and its record's fields), from its record, slots held and tier."""
        limits_on = self.settings.concurrency.enabled
        raw_names = [unquote(key) for key in candidates]
        with self.connection.pipeline(transaction=False) as pipe:
            for key in candidates:
                pipe.hgetall(self.keys.observe_record(key))
                pipe.exists(self.keys.paused_of(key))
                if limits_on:
                    pipe.zcount(self.keys.leases_of(key), now * 1000, "+inf")
            if candidates and self._resolver is None:
                pipe.hmget(self.keys.tiers(), raw_names)
            replies = pipe.execute()
        step = 3 if limits_on else 2
        stored = replies[step * len(candidates)] if candidates and self._resolver is None else []
        rows = []
        for i, key in enumerate(candidates):
            fields = _ints(replies[step * i])
            row = _row(key, display_name(key), fields, now)
            row.tier = self._tier(raw_names[i], key, stored[i] if stored else None)
            row.paused = bool(replies[step * i + 1])
            if limits_on:
                row.running = int(replies[step * i + 2])
                row.limit = self.settings.tiers.limit(row.tier)
            row.waiting = {queue: backlog[key] for queue, backlog in backlogs.items() if key in backlog}
            row.parked = [queue for queue, tenants in parked.items() if key in tenants]
            rows.append((row, fields))
        return rows

    def _add_org_slots(self, rows: list[TenantView], tenant_org: dict[str, str], now: float) -> None:
        """A tenant's slots for its jobs under an org are under the org's tag (:meth:`Keys.lease_base`): counted too."""
        asks = [(row, unquote(tenant_org[row.key])) for row in rows
                if row.key in tenant_org and not tenant_org[row.key].startswith("#")]
        if not asks:
            return
        with self.connection.pipeline(transaction=False) as pipe:
            for row, org in asks:
                pipe.zcount(self.keys.leases_of(row.key, org), now * 1000, "+inf")
            replies = pipe.execute()
        for (row, _), count in zip(asks, replies, strict=True):
            row.running = (row.running or 0) + int(count)

    def _tier(self, raw: str, key: str, stored: Any) -> str:
        config = self.settings.tiers
        if key.startswith("#"):
            return config.default  # no tenant, or a digest: the id itself is not known here
        found: object = self._resolver(raw) if self._resolver is not None else (
            None if stored is None else as_text(stored))
        return found if isinstance(found, str) and found in config.concurrency else config.default

    def _add_rules(self, rows: list[TenantView], now: float) -> None:
        """Round trip 4: the rule each top tenant's next job would meet, per job key configured in settings."""
        if not self._rules or not rows:
            return
        asks = [(row, rules, self.keys.window_of(job_key, row.key))
                for row in rows if not row.key.startswith("#") for job_key, rules in self._rules.items()]
        with self.connection.pipeline(transaction=False) as pipe:
            for _, rules, window in asks:
                self._peek(window, rules, str(round(now * 1000))).queue(pipe)
            replies = pipe.execute()
        for (row, rules, _), reply in zip(asks, replies, strict=True):
            matched = last_match(rules, self._peek.parse(reply).counts)
            if matched is not None:
                row.rule = matched.describe()

    def _fair_weights(self, backlogs: dict[str, dict[str, int]]) -> dict[str, float]:
        """Weight of each tenant waiting in a fair queue, from its record in the queue's state hash."""
        asks = [(queue, list(backlog)) for queue, backlog in backlogs.items()
                if backlog and queue not in self._shards.names]
        if not asks:
            return {}
        with self.connection.pipeline(transaction=False) as pipe:
            for queue, tenants in asks:
                state = self.keys.fair_queue(Queue.redis_queue_namespace_prefix + queue).state
                pipe.hmget(state, [TENANT_FIELD + tenant for tenant in tenants])
            replies = pipe.execute()
        weights: dict[str, float] = {}
        for (_, tenants), values in zip(asks, replies, strict=True):
            for tenant, value in zip(tenants, values, strict=True):
                weights[tenant] = max(weights.get(tenant, 0.0), record_weight(value) or 1.0)
        return weights


def reconciled(fair: list[FairQueue], waiting: WaitingReconciler, names: list[str], job_keys: list[str],
               bound: int = RECONCILE_BOUND) -> set[str]:
    """Make the fair queues' and the routed plain queues' counts agree with rq's lists first (rq's own commands
    change them); returns the queues whose counts are approximate (beyond ``bound``)."""
    fair_names = {queue.name for queue in fair}
    done = reconcile_queues(fair, bound)
    plain = waiting.reconcile(job_keys, [name for name in names if name not in fair_names])
    return {name for name, one in done.items() if not one.exact} | {name for name, ok in plain.items() if not ok}


def _row(key: str, label: str, fields: dict[str, int], now: float) -> TenantView:
    """A row's wait figures, live series and cumulative histogram, from its record's fields."""
    minute = int(now // 60)
    row = TenantView(label, key if key not in (ALL, OTHER) else "")
    row.wait_5m = WaitFigures.of(_window(fields, minute, 5))
    row.wait_60m = WaitFigures.of(_window(fields, minute, 60))
    row.series = _series(fields, int(now // TICK_SECONDS))
    row.histogram = from_fields(fields, "c:")
    row.histogram.total_us = fields.get("c:us", 0)
    return row


def plain_waiting(replies: Sequence[Any], lengths: dict[str, int]) -> dict[str, dict[str, int]]:
    """Plain queues' waiting counts (queue -> encoded tenant -> jobs) from the job keys' replies; an empty queue has
    nothing waiting, whatever counts were left."""
    waiting: dict[str, dict[str, int]] = {}
    for raw in replies:
        for name, count in _ints(raw).items():
            queue, tenant = parse_field(name)
            if count > 0 and lengths.get(queue):
                waiting.setdefault(queue, {})[tenant] = waiting.get(queue, {}).get(tenant, 0) + count
    return waiting


def _rest(everyone: TenantView, all_fields: dict[str, int], top: list[tuple[TenantView, dict[str, int]]], now: float,
          backlogs: dict[str, dict[str, int]], total_running: int | None) -> TenantView:
    """Everyone minus the top N: the ``_other`` row."""
    minute, tick = int(now // 60), int(now // TICK_SECONDS)
    rest = TenantView(OTHER_LABEL, "")
    for minutes in (5, 60):
        left = _window(all_fields, minute, minutes).minus(_window(fields, minute, minutes) for _, fields in top)
        setattr(rest, f"wait_{minutes}m", WaitFigures.of(left))
    rest.histogram = everyone.histogram.minus(row.histogram for row, _ in top)
    rest.series = _series(all_fields, tick, [fields for _, fields in top])
    rest.waiting = {queue: sum(backlog.values()) - sum(row.waiting.get(queue, 0) for row, _ in top)
                    for queue, backlog in backlogs.items()}
    if total_running is not None:
        rest.running = max(0, total_running - sum(row.running or 0 for row, _ in top))
    if everyone.wait_5m.starts:
        rest.share_5m = rest.wait_5m.starts / everyone.wait_5m.starts
    return rest


def _window(fields: dict[str, int], minute: int, minutes: int) -> Histogram:
    """Starts by bucket over the current minute and the ``minutes - 1`` before it."""
    held = {name[1:]: value for name, value in fields.items() if name.startswith("m")}
    slots = {slot for slot, value in held.items() if minute - minutes < value <= minute}
    return from_fields(fields, *(f"{slot}:" for slot in slots))


def _series(fields: dict[str, int], tick: int, minus: Sequence[dict[str, int]] = ()) -> list[tuple[float, float]]:
    """(tick start, mean wait) of a record's ticks, oldest first, ``minus`` the records taken out."""
    points = []
    for slot in range(TICK_SLOTS):
        held = fields.get(f"t{slot}")
        if held is None or not tick - TICK_SLOTS < held <= tick:
            continue
        count, total = fields.get(f"n{slot}", 0), fields.get(f"s{slot}", 0)
        for other in minus:
            if other.get(f"t{slot}") == held:
                count, total = count - other.get(f"n{slot}", 0), total - other.get(f"s{slot}", 0)
        if count > 0:
            points.append((float(held * TICK_SECONDS), max(0, total) / count / 1e6))
    return sorted(points)

