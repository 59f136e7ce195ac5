"""The one place Redis key names are built: every key starts with the prefix and carries one hash tag, so each Lua
script touches keys of one cluster slot; :func:`encode` turns user strings into short, brace-free, distinct key
parts."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from urllib.parse import quote

_SAFE = "._-@"
_MAX_PART = 120


def encode(part: str) -> str:
    """Encode a user string as a key part: injective, without ``{`` ``}`` ``:`` or spaces, bounded. Short strings are
    percent-encoded (readable), long ones ``#`` plus a SHA-256 digest (``#`` never survives percent-encoding, so the
    forms cannot collide)."""
    quoted = quote(part, safe=_SAFE)
    if len(quoted) <= _MAX_PART:
        return quoted
    return "#" + hashlib.sha256(part.encode("utf-8", "surrogatepass")).hexdigest()


def slot_of(key: str) -> str:
    """A key part in ``key``'s cluster slot, for our keys a script touches with an rq key: ``{<key>}`` for an untagged
    rq key, else ``{<its tag>}:<key, braces dropped>`` (a hash-tagged ``RQ_KEY_PREFIX``)."""
    start = key.find("{")
    end = key.find("}", start + 1) if start >= 0 else -1
    if end > start + 1:
        return "{" + key[start + 1:end] + "}:" + key.replace("{", "").replace("}", "")
    if start >= 0 or "}" in key:
        raise ValueError(f"rq key {key!r} has braces but no hash tag Redis Cluster would use: set "
                         "RQ_KEY_PREFIX to a plain prefix or one with a non-empty {tag}")
    return "{" + key + "}"


@dataclass(frozen=True)
class FairQueueKeys:
    """Key names of one fair queue. ``rq_list`` is rq's own list; every other key carries the hash tag
    ``{rq:queue:<name>}``, whose slot is the slot of rq's untagged list key, so one Lua call may touch
    rq's list and all the fair state on one Redis Cluster slot."""

    rq_list: str
    members: str  # HASH job id -> "<list position>|<encoded tenant>:<seq>" for every fair job waiting in the
    #               queue, and its tenant's FIFO: "<encoded tenant>:<seq>" -> job id (seq grows at the tail). rq 3.0
    #               job ids never hold ':' (rq's validate_job_id), so the two kinds of fields cannot meet, and a
    #               job's two fields are written and deleted by one command
    active: str  # ZSET tenant -> pass (stride scheduling), tenants that may be served now
    kept: str  # ZSET tenant -> pass when it went idle or was parked, while above the virtual time
    parked: str  # ZSET tenant -> until (ms): tenants at their limit, paused or over their rate: pops skip them
    state: str  # HASH head (list head's position) | vtime (pass of the last served tenant) | due | limited |
    #             kept_ttl (kept may expire), and per tenant with waiting jobs "=<tenant>" -> "<head seq>|<tail seq>|
    #             <weight>|<waiting>" (its FIFO's ends, its weight from its last push and how many of its jobs wait:
    #             lua/lib/fifo.lua), a pop reads it with the rest; reconcile_cursor: fair_reconcile.lua's HSCAN page
    inflight: str  # ZSET job id -> pop time (ms): popped, not yet known to have started
    wake: str  # LIST wake-ups for workers blocked while only parked tenants' jobs wait on rq's list
    costs: str  # HASH job id -> "<declared seconds or ''>|<function>" of waiting members (charge="runtime")
    charged: str  # HASH job id -> "<tenant>|<weight>|<estimate s>|<pop ms>|<declared>|<function>": popped,
    #               charged by estimate, not yet settled with its run time (charge="runtime")
    runtimes: str  # HASH "<tenant>|<function>" (also "*|<function>", "*|*") -> recent mean run time (s)
    limits: str  # HASH tenant -> concurrency limit as workers last reported it (lua/lib/claims.lua)
    claims: str  # ZSET "<tenant>|<job id>" -> expiry (ms): limited tenants' jobs handed out by pops, unreleased
    claimed: str  # HASH tenant -> its claims: at its limit, a pop parks the tenant instead of serving it
    orgs: str  # ZSET, every score 0: "<org>\0<pass: 8 bytes, big-endian double><tenant>" per org's active tenant, so
    #            ZRANGEBYLEX [<org>\0 (<org>\1 LIMIT 0 1 is the org's min-pass tenant (lib/stride.lua,
    #            docs/fair-queue.md "Organisations")

    @classmethod
    def names(cls) -> tuple[str, ...]:
        """The field names in declaration order: the one statement of the fair scripts' KEYS order. The
        loader binds KEYS[i] to a Lua local of the i-th name (``lua/lib/fair_keys.lua``, checked by a test), and
        :meth:`all_for_scripts` passes the keys in this order. (A dataclass's ``__match_args__`` is its fields'
        names in declaration order: read, not rebuilt by ``dataclasses.fields`` at every script call.)"""
        return cls.__match_args__

    def all_for_scripts(self) -> list[str]:
        """KEYS of every fair_*.lua script, in field order: rq's list first, then the fair keys."""
        return [getattr(self, name) for name in self.names()]

    def all(self) -> list[str]:
        """Every fair key (not rq's list), for ``empty``/``delete``."""
        return self.all_for_scripts()[1:]


@dataclass(frozen=True)
class Keys:
    """Key names under one prefix, checked where it enters (``fair_router.core.validation.Prefix``: no braces)."""

    prefix: str = "fair_router"

    @staticmethod
    def member(job_id: str) -> bytes:
        """A window entry for ``job_id``: an 8-byte digest (collision odds below 1e-14 within a window)."""
        return hashlib.blake2b(job_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()

    def window(self, job_key: str, tenant: str) -> str:
        """Sorted set job id -> enqueue time (ms) of one (job key, tenant); tagged by job key for batches."""
        return self.window_of(job_key, encode(tenant))

    def window_of(self, job_key: str, encoded_tenant: str) -> str:
        """:meth:`window` of a tenant given in its encoded form."""
        return f"{self.prefix}:{{{encode(job_key)}}}:win:{encoded_tenant}"

    def routed(self, job_key: str) -> str:
        """Hash target queue -> jobs routed there, of one job key; written by route.lua with the windows' tag."""
        return f"{self.prefix}:{{{encode(job_key)}}}:routed"

    def waiting(self, job_key: str) -> tuple[str, str]:
        """The waiting counts of one job key's jobs in the plain queues it routes into: ``"<queue>|<encoded tenant>"``
        -> jobs, and job id digest -> its field, so each job counts once. Tagged by job key, as route.lua writes them
        with the windows."""
        return f"{self.prefix}:{{{encode(job_key)}}}:waiting", f"{self.prefix}:{{{encode(job_key)}}}:waiting_jobs"

    def tiers(self) -> str:
        """Hash tenant -> tier name, written by ``FairRouter.set_tier`` / ``fair-router tier set``."""
        return f"{self.prefix}:{{tiers}}:map"

    def profile_changes(self) -> str:
        """Sorted set tenant -> time (ms) of its last tier, override or pause change through our API, trimmed to the
        last hour: the tier caches poll it to evict only what changed. Tagged as the tier map."""
        return f"{self.prefix}:{{tiers}}:changes"

    def lease_base(self, encoded_tenant: str, org: str | None = None) -> str:
        """The start of a tenant's lease-family keys: ``{lease:<tenant>}``, or for a tenant's jobs under an
        organisation ``{lease:!<org>}:t:<tenant>``, the org's tag, so one start call checks the tenant's and the
        org's limits on one cluster slot (``!`` never comes out of :func:`encode`, so the tags cannot meet)."""
        if org is None:
            return f"{self.prefix}:{{lease:{encoded_tenant}}}"
        return f"{self.org_base(org)}:t:{encoded_tenant}"

    def org_base(self, org: str) -> str:
        """The tag and start of an organisation's own start state (:meth:`org_leases` and the rest)."""
        return f"{self.prefix}:{{lease:!{encode(org)}}}"

    def leases(self, tenant: str, org: str | None = None) -> str:
        """Sorted set of the tenant's running jobs: job id -> lease expiry (ms); one tag per tenant (its org's when
        ``org``: :meth:`lease_base`)."""
        return self.leases_of(encode(tenant), org)

    def leases_of(self, encoded_tenant: str, org: str | None = None) -> str:
        """:meth:`leases` of a tenant given in its encoded form (a long id's digest cannot be decoded)."""
        return self.lease_base(encoded_tenant, org)

    def parked_in(self, tenant: str, org: str | None = None) -> str:
        """Set of the fair queues where a refused start parked the tenant at its concurrency limit: the release that
        frees a slot takes it and unparks the tenant in each. Same tag as its leases."""
        return f"{self.leases(tenant, org)}:parked_in"

    def overrides(self, tenant: str) -> str:
        """Hash of one tenant's overrides of its tier's values, one field per value so concurrent writers of different
        values never overwrite each other."""
        return f"{self.prefix}:{{tiers}}:tenant:{encode(tenant)}"

    def park_cause(self, tenant: str, queue: str) -> str:
        """Why a refused start parked ``tenant`` in fair queue ``queue``: "<reason>|<ms>", expiring with the park."""
        return f"{self.leases(tenant)}:parkwhy:{queue}"

    def org_overrides(self, org: str) -> str:
        """Hash of one organisation's overrides of its settings (``weight``, ``concurrency``, ``rate``, ``burst``),
        written by ``fair-router org set``; beside the tenants' overrides, apart from them (``org:``, not
        ``tenant:``)."""
        return f"{self.prefix}:{{tiers}}:org:{encode(org)}"

    def org_leases(self, org: str) -> str:
        """Sorted set of an organisation's running jobs: job id -> lease expiry (ms), under the org's tag."""
        return f"{self.org_base(org)}:leases"

    def org_parked_in(self, org: str) -> str:
        """Set of ``"<encoded tenant>|<fair queue>"`` where a start refused at the org's limit parked a tenant: the
        org's next release takes it and unparks each."""
        return f"{self.org_base(org)}:parked_in"

    def org_paused(self, org: str) -> str:
        """Exists while ``org`` is paused (``fair-router org pause``): holds the time of the pause (ms)."""
        return f"{self.org_base(org)}:paused"

    def org_rate(self, org: str) -> str:
        """GCRA state of the organisation's own rate (``orgs.<org>.rate``)."""
        return f"{self.org_base(org)}:rate"

    def paused(self, tenant: str, org: str | None = None) -> str:
        """Exists while ``tenant`` is paused (holds the pause's time, ms), under the tenant's own tag; with ``org``,
        its mirror under the org's tag (:meth:`lease_base`), which the start of its jobs under ``org`` reads."""
        return self.paused_of(encode(tenant), org)

    def paused_of(self, encoded_tenant: str, org: str | None = None) -> str:
        """:meth:`paused` of a tenant given in its encoded form (the dashboard's rows)."""
        return f"{self.lease_base(encoded_tenant, org)}:paused"

    def paused_orgs(self, tenant: str) -> str:
        """Set of the orgs under which ``tenant``'s pause is mirrored (:meth:`paused` with ``org``), for resume to
        clear them; the tenant's own tag."""
        return f"{self.paused(tenant)}:orgs"

    def rate(self, tenant: str, job_key: str | None = None, org: str | None = None) -> str:
        """GCRA state (theoretical arrival time, ms) of ``tenant``'s own rate, or with ``job_key`` of that job
        function's rate. Same tag as the leases, so one acquire checks every scope."""
        scope = "tenant" if job_key is None else f"job:{encode(job_key)}"
        return f"{self.leases(tenant, org)}:rate:{scope}"

    def rate_paid(self, tenant: str, job_id: str, org: str | None = None) -> str:
        """The start time (ms) reserved for a job deferred by a rate on a plain queue: it starts without paying
        again."""
        return f"{self.leases(tenant, org)}:paid:{encode(job_id)}"

    def paced(self, tenant: str, queue: str, org: str | None = None) -> str:
        """Set while ``tenant``'s starts from fair queue ``queue`` are paced there (lua/lib/start_rate.lua)."""
        return f"{self.leases(tenant, org)}:paced:{encode(queue)}"

    def limit_stats(self) -> str:
        """Hash of per-tier counters: ``<tier>:acquired|snoozed|released|reclaimed``."""
        return f"{self.prefix}:{{stats}}:limits"

    def recovery_turn(self, rq_list_key: str) -> str:
        """Short lock of one queue's recovery check, taken by one weighted worker at a time: ours, not rq's 899-second
        maintenance lock, which a dead worker can leave held."""
        return f"{self.prefix}:{slot_of(rq_list_key)}:recovery:turn"

    def abandoned(self, started_registry_key: str) -> str:
        """Sorted set of one queue's abandoned executions, moved out of rq's StartedJobRegistry for rq's cleanup to hand
        back; tagged ``{rq:wip:<name>}``, the slot of rq's registry key."""
        return f"{self.prefix}:{slot_of(started_registry_key)}:abandoned"

    def abandoned_total(self, started_registry_key: str) -> str:
        """How many of one queue's jobs were found abandoned (never reset), counted by the staging script."""
        return f"{self.prefix}:{slot_of(started_registry_key)}:abandoned:total"

    # -- observability (fair_router.observe): every key tagged {obs}, so one start record is one slot --

    def observe_record(self, encoded_tenant: str) -> str:
        """Hash of one tenant's job starts (layout in ``lua/observe_start.lua``); ``#all`` holds every start, ``#other``
        those of tenants past the per-minute cap."""
        return f"{self.prefix}:{{obs}}:rec:{encoded_tenant}"

    def observe_recent(self) -> str:
        """Sorted set encoded tenant -> time of its last admission (ms), trimmed to a few minutes: the dashboard's
        "busiest" candidates, and what spares a flush past the per-minute cap reading records."""
        return f"{self.prefix}:{{obs}}:recent"

    def observe_events(self) -> str:
        """Hash of event counters ``<event>:<queue>``."""
        return f"{self.prefix}:{{obs}}:events"

    def observe_pattern(self) -> str:
        """SCAN pattern of every observe key under this prefix (the flood scenario clears them between runs)."""
        return f"{self.prefix}:{{obs}}:*"

    def observe_job_keys(self) -> str:
        """Set of the job keys routers have routed (so readers find their :meth:`routed` counters)."""
        return f"{self.prefix}:{{obs}}:jobkeys"

    @staticmethod
    def fair_mark(rq_list_key: str) -> str:
        """A queue's fairness mark (the producers' prefix), set when a FairQueue is first used; named without our
        prefix, so a process with another prefix still finds it (and reports the mismatch)."""
        return f"fair_router:mark:{slot_of(rq_list_key)}"

    def fair_queue_legacy(self, rq_list_key: str) -> tuple[str, str, str, str, str]:
        """A fair queue's hashes of earlier layouts, read once by ``lua/fair_migrate.lua``, which moves them."""
        base = f"{self.prefix}:{slot_of(rq_list_key)}:fq"
        return (f"{base}:head", f"{base}:tail", f"{base}:weights", f"{base}:fifo", f"{base}:backlog")

    def fair_queue(self, rq_list_key: str) -> FairQueueKeys:
        """Keys of the fair queue whose rq list is ``rq_list_key``, tagged to hash like rq's own key."""
        base = f"{self.prefix}:{slot_of(rq_list_key)}:fq"
        fair = FairQueueKeys.names()[1:]  # every field after rq_list is a key of ours, named as the field
        return FairQueueKeys(rq_list_key, *(f"{base}:{name}" for name in fair))
