"""The fair queues' per-tenant state as the controls reach it: a tenant's record in a queue's ``state`` hash and
the hold and unpark scripts that pauses and raised limits send to every fair queue (the fair queue uses them
too; its other wrappers are in :mod:`fair_router.fairqueue.scripts`)."""

from __future__ import annotations

from typing import Any

from fair_router.core.keys import FairQueueKeys, encode
from fair_router.core.text import as_text as _text
from fair_router.store.luascript import Call, LuaScript

TENANT_FIELD = "="
"""The prefix of a tenant's record field in a fair queue's ``state`` hash (lua/lib/fifo.lua): never part of an
encoded tenant, so records and the state's own fields (head, vtime, due, limited, kept_ttl) cannot meet."""


def _record(record: Any) -> list[str]:
    """A tenant's record ("<head seq>|<tail seq>|<weight>|<waiting>", lua/lib/fifo.lua) split in its parts."""
    return _text(record).split("|")


def record_weight(record: Any) -> float | None:
    """The weight in a tenant's record; None when there is no record."""
    return None if record is None else float(_record(record)[2])


def record_org(record: Any) -> str | None:
    """The org (encoded) a tenant's record names (lua/lib/stride.lua parse_tenant), None when none."""
    if record is None:
        return None
    parts = _record(record)
    return parts[4] if len(parts) > 4 else None


def record_waiting(record: Any) -> int:
    """How many of a tenant's jobs wait, from its record; 0 when there is none. A record written before counts
    moved in counts its FIFO places, as lua/lib/fifo.lua's ``parse_tenant`` does."""
    if record is None:
        return 0
    head, tail, _, *count = _record(record)
    return int(count[0]) if count and count[0] else int(tail) - int(head) + 1


class FairUnparkScript(LuaScript[int]):
    """fair_unpark.lua: a tenant's slot was released; make it eligible and wake one worker if needed."""

    name = "fair_unpark"
    as_function = True  # once per limited job: its lua/lib pieces defined once, not per call (docs/benchmarks.md)

    def __call__(self, keys: FairQueueKeys, tenant: str, job_id: str = "", limit: int | None = None,
                 now_ms: str = "", org: str | None = None, org_limit: int | None = None) -> Call[int]:
        """``job_id``: the job whose slot was released (its claim here ends); ``limit``: the tenant's limit
        (0 none, None not known); ``org``: the job's org (None none) and ``org_limit`` its limit, likewise.
        Result: 1 if the tenant has jobs waiting in this queue and may be served."""
        args = [tenant, job_id, "" if limit is None else limit, now_ms]
        if org:
            args += [encode(org), "" if org_limit is None else org_limit]
        return self.call(keys.all_for_scripts(), args)

    def parse(self, reply: Any) -> int:
        return int(reply)


class FairHoldScript(LuaScript[int]):
    """fair_hold.lua: park a tenant before a pop hands out its job (paused), or report a paced tenant's start
    (parked exactly until its rate's next start)."""

    name = "fair_hold"

    def __call__(self, keys: FairQueueKeys, tenant: str, until_ms: int, paced: bool = False,
                 now_ms: str = "") -> Call[int]:
        """Result: 1 if the tenant has jobs waiting in this queue, else 0."""
        return self.call(keys.all_for_scripts(), [tenant, until_ms, int(paced), now_ms])

    def parse(self, reply: Any) -> int:
        return int(reply)
