"""Plain rq workers on a fair queue: the stale members they leave, detected and reported (docs/fair-queue.md),
never a silent count error."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from redis import Redis
from rq.job import Job

from fair_router.core.keys import FairQueueKeys
from fair_router.core.text import as_text as _text
from fair_router.fairqueue.scripts import FairTidyScript

logger = logging.getLogger("fair_router")

RAN = frozenset({"started", "finished", "failed", "stopped"})
"""Job statuses that mean some worker took the job."""

ADVICE = ("start every worker of this queue as a weighted worker (`fair-router worker`, `rq worker -w "
          "fair_router.WeightedWorker`, or django-rq's `rqworker --worker-class fair_router.WeightedWorker`): a plain "
          "`rq worker` takes its jobs first-in first-out, outside fair share")


@dataclass
class PlainPopReport:
    """One fair queue's stale members as our processes know them."""

    queue: str
    stale: int  # members found gone from rq's list, ever
    plain: int  # of those, found run by a worker without our pop (a lower bound: a sample is looked at)

    def describe(self) -> str:
        """One sentence naming the queue, what happened and what to do."""
        return (f"queue {self.queue!r}: at least {self.plain} of its fair jobs were taken by a worker that is not "
                f"fair-router's ({self.stale} taken off its list behind the fair pop in all); {ADVICE}")


class PlainPops:
    """Looks at fair queues' stale members on one connection (see the module docstring)."""

    def __init__(self, connection: Redis) -> None:
        self.connection = connection
        self._tidy = FairTidyScript(connection)

    def check(self, queue: str, keys: FairQueueKeys) -> PlainPopReport:
        """Tidy ``queue``: with rq's list empty every member left is dropped, so counts are exact; the stale ids noted
        since the last look are looked at, those whose job ran counted. One round trip, two when ids were noted."""
        result = self._tidy(keys).run()
        plain = result.plain
        ran = self._ran(result.ids) if result.ids else 0
        if ran:
            plain = int(self.connection.hincrby(keys.state, "plain", ran))
        return PlainPopReport(queue, result.stale, plain)

    def _ran(self, ids: list[str]) -> int:
        """How many of the jobs ``ids`` some worker took (their status says so)."""
        with self.connection.pipeline(transaction=False) as pipe:
            for job_id in ids:
                pipe.hget(Job.key_for(job_id), "status")
            statuses = pipe.execute()
        return sum(1 for status in statuses if status is not None and _text(status) in RAN)

