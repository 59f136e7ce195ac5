"""The one place Redis key names are built.

Every key starts with the prefix and carries exactly one hash tag (``{...}``) chosen so that each
Lua script only touches keys of one tag, which lets router state live on Redis Cluster.
Tenant ids and job keys are arbitrary user strings (``:`` ``{`` ``}`` unicode, kilobytes long);
:func:`encode` turns them into short, brace-free, distinct key parts.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from urllib.parse import quote

_SAFE = "._-@"
_MAX_PART = 120


def encode(part: str) -> str:
    """Encode a user string as a key part: injective, without ``{`` ``}`` ``:`` or spaces, bounded length.

    Short strings are percent-encoded (readable for ordinary ids such as ``acme`` or ``user-42``);
    long ones become ``#`` plus a SHA-256 digest. ``#`` never survives percent-encoding, so the two
    forms cannot collide.
    """
    quoted = quote(part, safe=_SAFE)
    if len(quoted) <= _MAX_PART:
        return quoted
    return "#" + hashlib.sha256(part.encode("utf-8", "surrogatepass")).hexdigest()


@dataclass(frozen=True)
class Keys:
    """Key names under one prefix. The prefix is validated by Settings/FairRouter (no braces)."""

    prefix: str = "fair_router"

    @staticmethod
    def member(job_id: str) -> bytes:
        """A window entry for ``job_id``: an 8-byte digest, so 100 entries fit in ~2 KB whatever the ids
        look like (a collision among one window's few hundred ids has odds below 1e-14)."""
        return hashlib.blake2b(job_id.encode("utf-8", "surrogatepass"), digest_size=8).digest()

    def window(self, job_key: str, tenant: str) -> str:
        """Sorted set of (job id -> enqueue time ms) for one (job key, tenant); tagged by job key so a
        batch of one job function for many tenants is one script call on one cluster slot."""
        return f"{self.prefix}:{{{encode(job_key)}}}:win:{encode(tenant)}"

    def tiers(self) -> str:
        """Hash tenant -> tier name, written by ``FairRouter.set_tier`` / ``fair-router tier set``."""
        return f"{self.prefix}:{{tiers}}:map"

    def leases(self, tenant: str) -> str:
        """Sorted set of the tenant's running jobs: job id -> lease expiry (ms). Own tag per tenant, so
        each acquire/release touches one slot."""
        return f"{self.prefix}:{{lease:{encode(tenant)}}}"

    def limit_stats(self) -> str:
        """Hash of per-tier counters: ``<tier>:acquired|snoozed|released|reclaimed``."""
        return f"{self.prefix}:{{stats}}:limits"
