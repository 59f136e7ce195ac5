"""What a tenant is, and finding a job's tenant (docs/hostile-input.md).

:func:`tenant_id` is the one normaliser every entry point calls before writing, so ``42`` and ``"42"`` are one tenant
and a value that is no tenant id is refused rather than becoming a new tenant per call."""

from __future__ import annotations

import logging
import reprlib
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from fair_router.core.jobmeta import META_TENANT

logger = logging.getLogger("fair_router")

TenantFunc = Callable[..., object]
"""Called with the job's own arguments; returns the tenant id (str or int), or None for "no tenant"."""

META_ORG = "fair_org"
"""The job meta key of a job's organisation (``fair_org=``): read only through :func:`stored_org`."""

DEFAULT_TENANT_MAX_BYTES = 256
"""Default of the ``tenant_max_bytes`` setting: the longest tenant id accepted, in bytes of UTF-8."""

_SHOWN = 60
"""Characters of a refused tenant id echoed in its error (the message stays short whatever the id)."""


class InvalidTenant(ValueError):
    """A tenant id that cannot be used: empty, over ``tenant_max_bytes``, or not UTF-8. Nothing is written."""


def _shown(text: str) -> str:
    return repr(text) if len(text) <= _SHOWN else repr(text[:_SHOWN]) + f"... ({len(text)} characters)"


def tenant_id(value: object, max_bytes: int = DEFAULT_TENANT_MAX_BYTES, kind: str = "tenant") -> str:
    """``value`` as a tenant id: a ``str`` as it is, an ``int`` as its decimal string. TypeError for other types;
    :class:`InvalidTenant` for an empty id, one over ``max_bytes`` of UTF-8, or lone surrogates. ``kind`` names
    the id in errors ("org": :func:`org_id`)."""
    if isinstance(value, bool) or not isinstance(value, (str, int)):
        shown = "" if kind == "tenant" else f": {shown_value(value)}"
        raise TypeError(f"a {kind} id must be a str or an int, got {type(value).__name__}{shown}")
    if isinstance(value, int):
        if value.bit_length() > 4 * max_bytes:  # > max_bytes decimal digits: never print it
            raise InvalidTenant(f"{kind} id {value.bit_length()}-bit int is longer than tenant_max_bytes "
                                f"({max_bytes} bytes)")
        text = format(int(value), "d")  # an IntEnum's own str() may be its name
    else:
        text = str.__str__(value)  # a str subclass's own __str__ may say anything
    if not text:
        raise InvalidTenant(f"a {kind} id must not be empty")
    try:
        size = len(text.encode("utf-8"))
    except UnicodeEncodeError:
        raise InvalidTenant(f"{kind} id {_shown(text)} is not valid UTF-8 text (lone surrogates)") from None
    if size > max_bytes:
        raise InvalidTenant(f"{kind} id is {size} bytes of UTF-8, over tenant_max_bytes ({max_bytes} bytes): "
                            f"{_shown(text)}")
    return text


def org_id(value: object, max_bytes: int = DEFAULT_TENANT_MAX_BYTES) -> str | None:
    """An organisation id (``fair_org=``) checked as a tenant id is (same bound), None for no org."""
    return None if value is None else tenant_id(value, max_bytes, "org")


def with_org(meta: Mapping[str, Any] | None, org: object, max_bytes: int = DEFAULT_TENANT_MAX_BYTES) -> dict[str, Any]:
    """``meta`` with ``org`` (checked by :func:`org_id`; None: left as it is) as the job's organisation."""
    return {**(meta or {})} if org is None else {**(meta or {}), META_ORG: org_id(org, max_bytes)}


def stored_org(meta: Mapping[str, Any] | None, max_bytes: int = DEFAULT_TENANT_MAX_BYTES) -> str | None:
    """The organisation a job's meta stores: the one reader of ``job.meta["fair_org"]``. None for none (or
    ``""``); :class:`InvalidTenant` naming the field and value for anything that is no org id."""
    value = (meta or {}).get(META_ORG)
    if value is None or (isinstance(value, str) and value == ""):
        return None
    try:
        return tenant_id(value, max_bytes, "org")
    except (TypeError, InvalidTenant) as exc:
        raise InvalidTenant(f'job.meta["{META_ORG}"] = {shown_value(value)} is no org id: {exc}') from None


def resolve_org(explicit: object, func: TenantFunc | None, args: Sequence[Any], kwargs: Mapping[str, Any],
                max_bytes: int = DEFAULT_TENANT_MAX_BYTES) -> str | None:
    """A job's organisation: ``fair_org=`` when given, else the ``org=`` callable's answer (None: no org). A bad
    id raises (a call-site bug); unlike a tenant, no org is normal and never warned."""
    if explicit is not None:
        return org_id(explicit, max_bytes)
    return None if func is None else org_id(func(*args, **kwargs), max_bytes)


STORED_FIELD = f'job.meta["{META_TENANT}"]'
"""How errors name the stored tenant: the field a user edits to fix it."""


class InvalidStoredTenant(InvalidTenant):
    """A job's stored tenant that is no tenant id: the job fails with this error, through rq's failure path."""

    def __init__(self, value: object, why: str) -> None:
        self.shown = shown_value(value)
        self.why = why
        super().__init__(f"{STORED_FIELD} = {self.shown} is no tenant id: {why}; set it to a str or int tenant id "
                         f"(or delete it) and enqueue the job again")


_SHORT = reprlib.Repr()
_SHORT.maxstring = _SHORT.maxother = _SHOWN
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxset = _SHORT.maxdict = 4
_SHORT.maxlevel = 2


def shown_value(value: object) -> str:
    """``repr(value)`` cut short (at most about 120 characters, whatever the value holds)."""
    if isinstance(value, int) and value.bit_length() > 4 * _SHOWN:  # a huge int's repr is slow, or refused
        return f"<{value.bit_length()}-bit int>"
    try:
        text = _SHORT.repr(value)
    except Exception:  # a value's own __repr__ raised
        return f"<{type(value).__name__} object>"
    return text if len(text) <= 2 * _SHOWN else text[:2 * _SHOWN] + "..."


def stored_tenant(meta: Mapping[str, Any] | None, max_bytes: int = DEFAULT_TENANT_MAX_BYTES) -> str | None:
    """The tenant a job's meta stores, through :func:`tenant_id`: the one reader of ``job.meta["fair_tenant"]``. None
    for no tenant (including ``""``); :class:`InvalidStoredTenant` for anything unusable."""
    value = (meta or {}).get(META_TENANT)
    if value is None or (isinstance(value, str) and value == ""):
        return None
    try:
        return tenant_id(value, max_bytes)
    except (TypeError, InvalidTenant) as exc:
        raise InvalidStoredTenant(value, str(exc)) from None


def usable_tenant(meta: Mapping[str, Any] | None, max_bytes: int = DEFAULT_TENANT_MAX_BYTES,
                  warn: bool = True) -> str | None:
    """:func:`stored_tenant`, an unusable one read as none (logged if ``warn``), for readers that must go on."""
    try:
        return stored_tenant(meta, max_bytes)
    except InvalidStoredTenant as exc:
        if warn:
            logger.warning("%s; read as no tenant here (a worker fails the job when it takes it)", exc)
        return None


def optional_tenant_id(value: object, max_bytes: int = DEFAULT_TENANT_MAX_BYTES) -> str | None:
    """:func:`tenant_id`, where None means "no tenant" (the router's enqueue methods, a job's meta)."""
    return None if value is None else tenant_id(value, max_bytes)


class TenantResolver:
    """Resolve the tenant of one job function: explicit, else callable, else None (warned)."""

    def __init__(self, job_key: str, func: TenantFunc | None, warn_every: float = 60.0) -> None:
        self.job_key = job_key
        self.func = func
        self.warn_every = warn_every
        self._last_warning = float("-inf")

    def resolve(self, explicit: object, args: Sequence[Any], kwargs: Mapping[str, Any],
                max_bytes: int = DEFAULT_TENANT_MAX_BYTES) -> str | None:
        """The tenant id, or None after a rate-limited warning. A bad explicit or returned id raises (a call-site bug);
        the callable raising is logged and the job enqueued unthrottled."""
        if explicit is not None:
            return tenant_id(explicit, max_bytes)
        if self.func is None:
            self._warn("no tenant callable and no fair_tenant= given")
            return None
        try:
            found = self.func(*args, **kwargs)
        except Exception as exc:
            self._warn(f"tenant callable raised {exc!r}")
            return None
        if found is None:
            self._warn("tenant callable returned no tenant")
            return None
        return tenant_id(found, max_bytes)

    def _warn(self, reason: str) -> None:
        now = time.monotonic()
        if now - self._last_warning >= self.warn_every:
            self._last_warning = now
            logger.warning("%s: %s; enqueued to its base queue without throttling", self.job_key, reason)
