"""``python manage.py shop ACTION``: what tests/test_django.py does inside the Django project, printing one JSON
line of what it saw.

- ``enqueue-decorated``: the ``@fair_job`` function ``shop.tasks.process`` handed to rq's ``Queue.enqueue``,
  django-rq's ``enqueue`` and ``get_queue().enqueue``, ``FairQueue.enqueue``, and its own ``delay``.
- ``transaction rollback|commit``: inside ``transaction.atomic()`` an order row, ``process.delay`` (its id
  saved on the row), ``process.enqueue_many``, django-rq's ``enqueue`` and an enqueue into django-rq's queue
  made fair (``queue_class=fair_class_of(DjangoRQ)``); then roll back or commit.
- ``capped N``: ``N`` delays of one tenant inside one transaction, past its backlog cap, then commit.
- ``request-finished``: ``process.delay`` outside any transaction, then Django's ``request_finished`` signal.
- ``fairqueue-class``: django-rq's ``get_queue`` with ``queue_class="fair_router.FairQueue"``: the warnings.
- ``fair-class``: django-rq's queue (``commit_mode="auto"``) as a weighted worker rebuilds it once marked fair.
"""

from __future__ import annotations

import json
import warnings
from typing import Any

import django_rq
from django.core.management.base import BaseCommand
from django.core.signals import request_finished
from django.db import transaction
from django_rq.queues import DjangoRQ
from rq import Queue
from rq.job import Job

from fair_router import FairQueue, Settings
from fair_router.fairqueue.combined import as_fair, fair_class_of
from shop import tasks
from shop.models import Order


class Rollback(Exception):
    """Raised to roll the transaction back."""


def queued(name: str) -> list[str]:
    connection = django_rq.get_connection(name)
    return [raw.decode() for raw in connection.lrange(f"rq:queue:{name}", 0, -1)]


class Command(BaseCommand):
    help = "fair-router's Django checks (tests/test_django.py)"

    def add_arguments(self, parser: Any) -> None:
        parser.add_argument("action")
        parser.add_argument("arg", nargs="?")

    def handle(self, *args: Any, action: str, arg: str | None = None, **options: Any) -> None:
        result = getattr(self, action.replace("-", "_"))(arg)
        self.stdout.write(json.dumps(result))

    def enqueue_decorated(self, _: str | None) -> dict[str, Any]:
        connection = django_rq.get_connection("default")
        jobs = {
            "rq": Queue("default", connection=connection).enqueue(tasks.process, "rq", 1),
            "django_rq": django_rq.enqueue(tasks.process, "django_rq", 1),
            "django_rq_queue": django_rq.get_queue("default").enqueue(tasks.process, "django_rq_queue", 1),
            "fairqueue": FairQueue("fair", connection=connection).enqueue(tasks.process, "fairqueue", 1,
                                                                         fair_tenant="fairqueue"),
            "delay": tasks.process.delay("delay", 1),
        }
        return {name: {"id": job.id, "func_name": job.func_name, "origin": job.origin} for name, job in jobs.items()}

    def transaction(self, how: str | None) -> dict[str, Any]:
        seen: dict[str, Any] = {}
        try:
            with transaction.atomic():
                order = Order.objects.create(tenant="acme")
                job = tasks.process.delay("acme", 1)
                order.job_id = job.id
                order.save()
                many = tasks.process.enqueue_many([(("acme", 2), {}), (("acme", 3), {})])
                django_rq.enqueue(tasks.log, "django_rq", 1)
                fair_django = django_rq.get_queue("fair", queue_class=fair_class_of(DjangoRQ))  # django-rq's, fair
                fair_django.enqueue(tasks.log, "fair_django", 1, fair_tenant="fair_django", job_id="fair-django-1")
                seen = {"delay_id": job.id, "many_ids": [j.id for j in many],
                        "inside": {"fair": queued("fair"), "default": queued("default")},
                        "exists_inside": Job.exists(job.id, connection=django_rq.get_connection("fair"))}
                if how == "rollback":
                    raise Rollback
        except Rollback:
            pass
        seen["after"] = {"fair": queued("fair"), "default": queued("default")}
        seen["orders"] = list(Order.objects.values_list("job_id", flat=True))
        return seen

    def capped(self, count: str | None) -> dict[str, Any]:
        with transaction.atomic():
            ids = [tasks.process.delay("capped", n).id for n in range(int(count or 0))]
        return {"ids": ids, "after": queued("fair")}

    def request_finished(self, _: str | None) -> dict[str, Any]:
        job = tasks.process.delay("acme", 1)
        before = queued("fair")
        request_finished.send(sender=self.__class__)
        return {"id": job.id, "before": before, "after": queued("fair")}

    def fairqueue_class(self, _: str | None) -> dict[str, Any]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            queue = django_rq.get_queue("fair", queue_class="fair_router.FairQueue")
        return {"class": type(queue).__name__, "warnings": [str(w.message) for w in caught]}

    def fair_class(self, _: str | None) -> dict[str, Any]:
        fair = as_fair(django_rq.get_queue("fair", commit_mode="auto"), Settings())
        return {"class": type(fair).__name__, "mro": [cls.__name__ for cls in type(fair).__mro__],
                "commit_mode": fair._commit_mode, "fair": isinstance(fair, FairQueue)}
