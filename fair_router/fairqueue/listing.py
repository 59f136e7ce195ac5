"""What rq's tools read on a FairQueue: its waiting jobs in serving order (``get_job_ids`` and through it rq's
``jobs``, ``job_ids``, positions), a replay of the pops on one snapshot (``serving_order``)."""

from __future__ import annotations

import struct

from redis import Redis

from fair_router.core.keys import FairQueueKeys
from fair_router.core.text import as_text
from fair_router.fairqueue.scripts import tenant_orgs, tenant_weights
from fair_router.fairqueue.serving_order import PASS_FORMAT, FairSnapshot, OrgPlace, serving_order

FIRST_ESTIMATE = 0.01
"""charge="runtime": seconds a pop charges while nothing has been measured on the queue (fair_pop.lua's)."""


def snapshot(connection: Redis, keys: FairQueueKeys, runtime: bool) -> FairSnapshot:
    """What the replay reads, in one MULTI; ``runtime``: the queue charges run time (estimates are read)."""
    with connection.pipeline() as pipe:  # MULTI: one consistent snapshot
        pipe.lrange(keys.rq_list, 0, -1)
        pipe.hgetall(keys.members)
        pipe.zrange(keys.active, 0, -1, withscores=True)
        pipe.zrange(keys.kept, 0, -1, withscores=True)
        pipe.hgetall(keys.state)
        pipe.hgetall(keys.costs)
        pipe.hgetall(keys.runtimes)
        pipe.zrange(keys.orgs, 0, -1)
        listed, fields, active, kept, state, costs, runtimes, in_orgs = pipe.execute()
    members = {k: v for k, v in fields.items() if ":" not in as_text(k)}  # not FIFO places (core/keys.py)
    return FairSnapshot(
        listed=[as_text(raw) for raw in listed],
        members={as_text(k): as_text(v) for k, v in members.items()},
        active={as_text(k): float(v) for k, v in active},
        kept={as_text(k): float(v) for k, v in kept},
        weights=tenant_weights(state),
        vtime=float(state.get(b"vtime") or 0),
        costs=_estimates(members, costs, runtimes) if runtime else {},
        places={tenant: OrgPlace(org, float(weight or 1), pass_, on == "1")
                for tenant, (org, weight, pass_, on) in tenant_orgs(state).items()},
        in_orgs=[_member_text(member) for member in in_orgs],
    )


def _member_text(member: bytes) -> str:
    """A member of ``orgs`` (lua/lib/orgs.lua: an 8-byte pass) as the replay reads it: "<org>\\0<pass>\\0<tenant>"."""
    org, _, rest = member.partition(b"\0")
    (pass_,) = struct.unpack(">d", rest[:8])
    return f"{as_text(org)}\0{PASS_FORMAT % pass_}\0{as_text(rest[8:])}"


def serving_ids(connection: Redis, keys: FairQueueKeys, runtime: bool, offset: int = 0, length: int = -1
                ) -> list[str]:
    """The waiting jobs' ids (exactly rq's list), in the order pops would serve them if nothing more were
    pushed; ``offset`` and ``length`` as rq's ``get_job_ids``."""
    ids = serving_order(snapshot(connection, keys, runtime))
    end = None if length < 0 else offset + length
    return ids[offset:end]


def _estimates(members: dict[bytes, bytes], costs: dict[bytes, bytes], runtimes: dict[bytes, bytes]
               ) -> dict[str, float]:
    """Job id -> what its pop would charge (charge="runtime"), as fair_pop.lua estimates it."""
    means = {as_text(k): float(v) for k, v in runtimes.items()}
    estimates = {}
    for raw, value in members.items():
        job_id = as_text(raw)
        tenant = as_text(value).rpartition("|")[2].rpartition(":")[0]
        declared, _, func = as_text(costs.get(raw, b"|")).partition("|")
        estimates[job_id] = float(declared) if declared else means.get(
            f"{tenant}|{func}", means.get(f"*|{func}", means.get("*|*", FIRST_ESTIMATE)))
    return estimates
