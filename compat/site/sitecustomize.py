"""Loaded by every Python process of an rq-suite run (``compat.run`` puts this folder on PYTHONPATH).

rq's tests reach Redis at localhost:6379, hard-coded (``Redis()``, ``redis://127.0.0.1:6379/N``),
in the pytest process and in the ``rqworker`` / spawned work-horse processes they start. We never
touch that port: each TCP connection redis-py opens to localhost:6379 goes instead to the private
server whose port is in ``$RQ_SUITE_REDIS_PORT``. Only the socket's target changes; the clients'
own ``connection_kwargs`` keep saying 6379, as rq's CLI tests expect. Nothing else is patched here:
the class substitution is the pytest plugin's job (``compat.plugin``).
"""

from __future__ import annotations

import os
from typing import Any


def _redirect_localhost_6379(port: int) -> None:
    from redis.connection import Connection

    original: Any = Connection.__init__
    if getattr(original, "rq_suite_redirect", None) is not None:
        return

    def __init__(self: Connection, host: str = "localhost", port_: int | str = 6379, *args: Any, **kwargs: Any) -> None:
        if "port" in kwargs:
            port_ = kwargs.pop("port")
        if host in ("localhost", "127.0.0.1") and int(port_) == 6379:
            port_ = port
        original(self, host, port_, *args, **kwargs)

    __init__.rq_suite_redirect = port  # type: ignore[attr-defined]
    Connection.__init__ = __init__  # type: ignore[method-assign,assignment]


if os.environ.get("RQ_SUITE_REDIS_PORT"):
    _redirect_localhost_6379(int(os.environ["RQ_SUITE_REDIS_PORT"]))
