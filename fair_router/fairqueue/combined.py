"""Fair serving follows the queue, not its class: a queue marked fair of any rq Queue class is served through
``Fair<Class>`` (the user's class first, then :class:`FairQueue`), or :class:`QueueClassConflict` says why not."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any, cast

from rq import Queue

from fair_router.fairqueue.queue import FairQueue
from fair_router.rq_internals.queue import RqQueueSeam
from fair_router.rq_internals.worker import rebuilt_as

if TYPE_CHECKING:
    from fair_router.config.settings import Settings


class QueueClassConflict(TypeError):
    """A queue marked fair whose Queue class cannot be combined with FairQueue (the message names the queue,
    its class, why and the fix)."""


def _fix(queue: str, cls: type) -> str:
    return (f"fix: make {cls.__module__}.{cls.__qualname__} a class fair-router can combine (a Queue subclass "
            f"whose overrides of FairQueue's methods call super() and whose __init__ takes rq's arguments), or "
            f"serve {queue!r} by a worker of its own started with --queue-class fair_router.FairQueue")


def _replaces(attribute: object) -> bool:
    """Whether a method (plain, class or static, or a property's getter) never calls ``super()``; a plain
    value (a class attribute such as ``recover_after``) is a setting, not a replacement."""
    func = getattr(attribute, "__func__", None) or getattr(attribute, "fget", None) or attribute
    code = getattr(func, "__code__", None)
    return code is not None and "super" not in code.co_names


WRAPPERS = frozenset({"enqueue", "enqueue_call", "enqueue_at", "enqueue_in"})
"""rq's public enqueue methods: a class may wrap them its own way (django-rq's ``enqueue_call`` defers to
``original_enqueue_call``, which calls ``super()``); the fair push happens below them, in the seam."""


def _replaced(cls: type[Queue]) -> list[str]:
    """The methods FairQueue (or the seam under it) defines that ``cls`` overrides without calling
    ``super()``, its public enqueue methods aside: in ``Fair<cls>`` they would run instead of fair-router's."""
    ours = (set(vars(FairQueue)) | set(vars(RqQueueSeam))) - WRAPPERS
    found: list[str] = []
    for klass in cls.__mro__:
        if klass is Queue or not issubclass(klass, Queue):
            break
        for name, attribute in vars(klass).items():
            if name in ours and not name.startswith("__") and name not in found and _replaces(attribute):
                found.append(name)
    return sorted(found)


@functools.cache
def fair_class_of(cls: type) -> type[FairQueue]:
    """The class serving a queue built by ``cls`` fairly: FairQueue for rq's Queue (``cls`` if a FairQueue already),
    else ``Fair<cls>``, made once per class; :class:`QueueClassConflict` when the two cannot be combined."""
    if cls is Queue:
        return FairQueue
    if not issubclass(cls, Queue):
        raise QueueClassConflict(f"{cls.__qualname__} is not an rq Queue class")
    if issubclass(cls, FairQueue):
        return cls
    if issubclass(cls, RqQueueSeam):
        raise QueueClassConflict(f"{cls.__qualname__} is a seam queue of its own (not a FairQueue)")
    replaced = _replaced(cls)
    if replaced:
        raise QueueClassConflict(f"{cls.__qualname__} overrides {', '.join(replaced)} without calling super(): "
                                 "fair-router's fair pop, push or listing would not run")
    try:
        made = type(f"Fair{cls.__name__}", (cls, FairQueue), {
            "__module__": __name__,
            "__doc__": f"{cls.__module__}.{cls.__qualname__} served by fair-router's FairQueue (its methods first).",
        })
    except TypeError as exc:  # metaclass or layout conflict, an MRO that cannot be linearized
        raise QueueClassConflict(f"{cls.__qualname__} cannot be combined with FairQueue ({exc})") from None
    return cast(type[FairQueue], made)


def as_fair(queue: Queue, settings: Settings, prefix: str | None = None) -> FairQueue:
    """``queue`` built again as ``fair_class_of`` its class with the same connection, serializer, job class, death
    penalty, default timeout and own attributes; else :class:`QueueClassConflict`."""
    if isinstance(queue, FairQueue):
        return queue
    cls: type = type(queue)
    try:
        fair_cls = fair_class_of(cls)
    except QueueClassConflict as exc:
        raise QueueClassConflict(f"queue {queue.name!r} is marked fair but its class cannot serve it fairly: "
                                 f"{exc}; {_fix(queue.name, cls)}") from None
    try:
        fair = cast(FairQueue, rebuilt_as(fair_cls, queue, settings=settings))
    except TypeError as exc:
        raise QueueClassConflict(f"queue {queue.name!r} is marked fair but {cls.__qualname__}.__init__ does not take "
                                 f"rq's Queue arguments plus FairQueue's ({exc}); {_fix(queue.name, cls)}") from None
    rqs = set(vars(Queue(queue.name, connection=queue.connection)))  # rq's own (FairQueue may set them its way)
    own: dict[str, Any] = fair.__dict__
    for name, value in vars(queue).items():  # what the class's __init__ set, from arguments we could not pass
        if name not in rqs or name not in own:
            own[name] = value
    if prefix is not None:
        fair.use_settings(settings, prefix)
    return fair
