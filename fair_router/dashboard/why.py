"""The dashboard's "why": one job's :func:`~fair_router.observe.why.explain` and one tenant's
:func:`~fair_router.routing.tenant_why.explain_tenant` as the JSON the page's why panel draws (docs/why.md, "On the
dashboard"). Read-only, as both are; an id no job can have is answered ``not_found`` without asking Redis."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from fair_router.dashboard.reader import SnapshotReader
from fair_router.observe.why import Reason, explain
from fair_router.routing.tenant_why import explain_tenant

MAX_JOB_ID_LENGTH = 1024
"""Longest job id the dashboard looks up. rq (3.0) bounds a job id's characters (letters, digits, ``_``, ``-``),
not its length; a longer query is refused (400) rather than sent to Redis as a key."""


def job_answer(reader: SnapshotReader, job_id: str) -> tuple[dict[str, Any], int]:
    """(JSON body, HTTP status) for ``GET api/why/job?id=``: 200 with the answer, 404 with the ``not_found``
    answer, 400 with an ``error`` for a missing or over-long id."""
    if not job_id:
        return {"error": "give a job id: api/why/job?id=<job id>"}, 400
    if len(job_id) > MAX_JOB_ID_LENGTH:
        return {"error": f"a job id of {len(job_id)} characters is over the {MAX_JOB_ID_LENGTH} the dashboard "
                         "looks up: no job has it"}, 400
    answer = explain(job_id, reader.connection, reader.settings)  # an id rq refuses: not_found, Redis not asked
    return _ordered(answer.as_dict(), answer.facts), 404 if answer.reason == Reason.NOT_FOUND else 200


def tenant_answer(reader: SnapshotReader, tenant: str) -> tuple[dict[str, Any], int]:
    """(JSON body, HTTP status) for ``GET api/why/tenant?id=``: 200 with the answer, 400 with an ``error`` for an
    id no tenant can have (empty, or over ``tenant_max_bytes``)."""
    try:
        answer = explain_tenant(tenant, reader.connection, reader.settings)
    except (TypeError, ValueError) as exc:  # fair_router.InvalidTenant is a ValueError
        return {"error": f"not a tenant id: {exc}"}, 400
    return _ordered(answer.as_dict(), answer.facts), 200


def _ordered(body: dict[str, Any], facts: Mapping[str, Any]) -> dict[str, Any]:
    """``body`` with ``fact_order``: the facts' names in the answer's order (JSON objects are sent with sorted keys)."""
    return {**body, "fact_order": list(facts)}
