"""Queue classes a user might give rq's ``--queue-class``: one fair-router can combine with FairQueue, and
two it cannot."""

from typing import Any

from rq import Queue


class AuditedQueue(Queue):
    """Counts its enqueues (a cooperative override: it calls super())."""

    def enqueue_call(self, *args: Any, **kwargs: Any) -> Any:
        self.connection.incr("shop:audited")
        return super().enqueue_call(*args, **kwargs)


class OwnListingQueue(Queue):
    """Replaces rq's listing without calling super(): a FairQueue's listing would never run."""

    def get_job_ids(self, offset: int = 0, length: int = -1) -> list[str]:
        return []


class TeamQueue(Queue):
    """Needs a team to be built: rq's arguments alone cannot build it again."""

    def __init__(self, name: str, team: str, **kwargs: Any) -> None:
        self.team = team
        super().__init__(name, **kwargs)
