"""What rq's tools read and change on a FairQueue: listings in serving order (``get_job_ids``, and through
it rq's ``jobs``, ``get_jobs``, ``job_ids``), job positions, and the removals (``remove``, ``empty``,
``delete``, ``compact``), each keeping rq's list and the fair structure in step. The listing is a replay
of the pops on one snapshot (:mod:`fair_router.fairqueue.serving_order`)."""

from __future__ import annotations

from typing import Any, cast

from redis.client import Pipeline
from rq.job import Job
from rq.utils import as_text

from fair_router.fairqueue.base import FairQueueBase
from fair_router.fairqueue.serving_order import FairSnapshot, serving_order
from fair_router.store.fair_scripts import FairRemoveScript, tenant_weights

FIRST_ESTIMATE = 0.01
"""charge="runtime": seconds a pop charges while nothing has been measured on the queue (fair_pop.lua's)."""


class FairListing(FairQueueBase):
    """rq's view of a FairQueue: listings, positions and removals."""

    def get_job_ids(self, offset: int = 0, length: int = -1) -> list[str]:
        """The waiting jobs' ids (exactly rq's list), in the order pops would serve them if nothing more
        were pushed (:func:`fair_router.fairqueue.serving_order.serving_order`)."""
        keys = self.fair_keys
        with self.connection.pipeline() as pipe:  # MULTI: one consistent snapshot
            pipe.lrange(self.key, 0, -1)
            pipe.hgetall(keys.members)
            pipe.zrange(keys.active, 0, -1, withscores=True)
            pipe.zrange(keys.kept, 0, -1, withscores=True)
            pipe.hgetall(keys.state)
            pipe.hgetall(keys.costs)
            pipe.hgetall(keys.runtimes)
            listed, fields, active, kept, state, costs, runtimes = pipe.execute()
        members = {k: v for k, v in fields.items() if ":" not in as_text(k)}  # not FIFO places (core/keys.py)
        snapshot = FairSnapshot(
            listed=[as_text(raw) for raw in listed],
            members={as_text(k): as_text(v) for k, v in members.items()},
            active={as_text(k): float(v) for k, v in active},
            kept={as_text(k): float(v) for k, v in kept},
            weights=tenant_weights(state),
            vtime=float(state.get(b"vtime") or 0),
            costs=_estimates(members, costs, runtimes) if self.charge == "runtime" else {},
        )
        ids = serving_order(snapshot)
        end = None if length < 0 else offset + length
        return ids[offset:end]

    def get_job_position(self, job_or_id: Job | str) -> int | None:
        """The job's place in :meth:`get_job_ids` (serving order), None when it is not waiting here."""
        job_id = job_or_id.id if isinstance(job_or_id, Job) else job_or_id
        ids = self.get_job_ids()
        return ids.index(job_id) if job_id in ids else None

    def remove(self, job_or_id: Job | str, pipeline: Pipeline | None = None) -> Any:
        """Take the job out of rq's list and of the fair structure, in one script (rq's LREM result)."""
        job_id = job_or_id.id if isinstance(job_or_id, Job) else job_or_id
        return self._script(FairRemoveScript)(self.fair_keys, job_id).run_or_queue(pipeline)

    def empty(self) -> Any:
        """rq's ``empty`` (deletes every listed job, which is every waiting job), then the fair keys."""
        removed = super().empty()  # type: ignore[no-untyped-call]
        self.connection.delete(*self.fair_keys.all())
        return removed

    def delete(self, delete_jobs: bool = True) -> None:
        """rq's ``delete``; the fair keys go too."""
        super().delete(delete_jobs=delete_jobs)
        self.connection.delete(*self.fair_keys.all())

    def compact(self) -> None:
        """Drop ids whose job is gone. rq's version empties the list and rebuilds it, which would leave a
        moment with no list entries for the fair structure; this takes each dead id out with
        :meth:`remove` instead."""
        for raw in cast(list[bytes], self.connection.lrange(self.key, 0, -1)):
            job_id = as_text(raw)
            if not self.job_class.exists(job_id, self.connection):
                self.remove(job_id)


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
