"""The base of the script wrappers: which text a script sends (a file of ``lua/built``, written by ``make lua``:
tools/build_lua.py), and how (:class:`Call` chooses the transport). docs/internals.md has the details."""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from importlib.resources import files
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar
from weakref import WeakKeyDictionary

from redis import Redis
from redis.client import Pipeline
from redis.connection import ConnectionPool
from redis.exceptions import NoPermissionError, NoScriptError, OutOfMemoryError, ReadOnlyError, ResponseError

if TYPE_CHECKING:
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

R = TypeVar("R")
T = TypeVar("T")

_LOADED: WeakKeyDictionary[ConnectionPool, set[str]] = WeakKeyDictionary()
"""Per connection pool (one Redis server), the SHAs this process has loaded there with SCRIPT LOAD."""
_SOURCES: dict[str, str] = {}
"""SHA or function name -> source of every script built in this process (:func:`execute_loaded`, :func:`sent_again`)."""

_NO_FUNCTIONS = "fn:none"
"""In a pool's ``_LOADED`` set: its server or user can have no Redis functions (run scripts as EVALSHA)."""
BUILT = "built"
"""``lua/built``: the generated, checked-in texts Redis runs."""
MINIFIED = ("start", "observe_start", "fair_hold", "fair_unpark", "fair_settle")
"""Scripts sent whole as EVAL on pipelines someone else executes (rq's MULTIs; on a cluster, any), once per job, as
``lua/built/<name>.min.lua`` (no comments or indentation): Redis reads and hashes the text at every call."""


def no_functions(error: ResponseError, command: str) -> bool:
    """Whether ``command`` (``fcall``, ``function``) was refused because the server or the user cannot have functions:
    an error naming the command itself, not one met inside the function."""
    text = str(error).lower()
    refused = isinstance(error, NoPermissionError) or "unknown command" in text or "unknown subcommand" in text
    return refused and command in text


def function_lost(reply: object) -> bool:
    """Whether ``reply`` is Redis' "Function not found": it lost a library this process had loaded (FUNCTION FLUSH, a
    restart without persistence); the call did nothing (:meth:`Call.queue_function`)."""
    return isinstance(reply, ResponseError) and "function not found" in str(reply).lower()


def forget_functions() -> None:
    """After a "Function not found": Redis lost the libraries this process loaded there (with a restart, on every
    pool of that server), so every pool's are forgotten; each is loaded again at its next use."""
    for loaded in list(_LOADED.values()):
        loaded.difference_update({name for name in loaded if name.startswith("fair_router_")})


def lua_dir() -> Traversable:
    """The scripts: ``fair_router/lua`` inside an installed wheel, else the checkout's ``lua/`` (one copy in git)."""
    packaged = files("fair_router").joinpath("lua")
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "lua"


def script_names() -> list[str]:
    """Every script fair-router sends (``lua/*.lua``; the pieces in ``lua/lib`` go inside them)."""
    return sorted(entry.name.removesuffix(".lua") for entry in lua_dir().iterdir() if entry.name.endswith(".lua"))


def built(name: str) -> str:
    """The text Redis runs for ``name``: ``lua/built/<name>.lua`` as checked in (``make lua`` writes it)."""
    return lua_dir().joinpath(BUILT).joinpath(f"{name}.lua").read_text(encoding="utf-8")


def sent_text(name: str) -> str:
    """The text script ``name`` is registered and sent as: ``lua/built/<name>.lua`` (``.min.lua``: :data:`MINIFIED`)."""
    return built(f"{name}.min" if name in MINIFIED else name)


class LuaScript(Generic[R]):
    """Base of the script wrappers: the built text registered on ``connection``. A subclass sets ``name``, names KEYS
    and ARGV in its ``__call__`` (returning :meth:`call`) and types the reply in :meth:`parse`."""

    name: ClassVar[str]
    as_function: ClassVar[bool] = False
    """Run as a Redis function (FCALL) where the server has them: Redis >= 7, a standalone client, FUNCTION LOAD
    allowed; else EVALSHA (EVAL queued by :meth:`Call.queue_function`). For a hot script whose pieces cost much of
    each call (the pop, the push, the start)."""

    def __init__(self, connection: Redis) -> None:
        self.source = self.build_source()
        self._registered = connection.register_script(self.source)
        self.sha: str = self._registered.sha
        _SOURCES[self.sha] = self.source
        self._connection = connection
        self.library = built(f"{self.name}.library") if self.as_function else ""
        self.function: str | None = self.library.split("\n", 1)[0].removeprefix("#!lua name=") or None
        if self.function is not None:
            _SOURCES[self.function] = self.source

    def ensure_loaded(self) -> None:
        """SCRIPT LOAD this script on its connection's server, once per connection pool and process (a round
        trip the first time only), so that :meth:`Call.queue_loaded` may send EVALSHA."""
        loaded = _LOADED.setdefault(self._connection.connection_pool, set())
        if self.sha not in loaded:
            self._connection.script_load(self.source)
            loaded.add(self.sha)

    def build_source(self) -> str:
        """The text registered and sent (:func:`sent_text`)."""
        return sent_text(self.name)

    def call(self, keys: Sequence[str], args: Sequence[Any]) -> Call[R]:
        return Call(self, list(keys), list(args))

    def parse(self, reply: Any) -> R:
        """The script's reply as its typed result."""
        raise NotImplementedError

    def evalsha(self, keys: list[str], args: list[Any]) -> Any:
        """The raw reply of one run on its own: FCALL (the library loaded after "Function not found") where the server
        may have functions, else EVALSHA; why: docs/internals.md ("Transport")."""
        pool = getattr(self._connection, "connection_pool", None)  # None: a cluster client (module docstring)
        if self.function is not None and pool is not None and _NO_FUNCTIONS not in _LOADED.get(pool, ()):
            try:
                return self._connection.fcall(self.function, len(keys), *keys, *args)
            except ResponseError as error:
                if no_functions(error, "fcall"):
                    _LOADED.setdefault(pool, set()).add(_NO_FUNCTIONS)
                elif not function_lost(error):
                    raise
                else:
                    forget_functions()
                    if self.loaded_function(self._connection):  # loaded again, unless Redis refuses it now
                        return self._connection.fcall(self.function, len(keys), *keys, *args)
        return self._registered(keys=keys, args=args)

    def loaded_function(self, pipeline: Redis) -> str | None:
        """The function to queue as FCALL on ``pipeline`` (or call): its library loaded on its server by this process
        (FUNCTION LOAD, a round trip the first time only); None where it cannot be (not :attr:`as_function`, a
        cluster's pipeline, no functions, Redis out of memory or read-only): then EVAL or EVALSHA."""
        pool = getattr(pipeline, "connection_pool", None)
        if self.function is None or pool is None or _NO_FUNCTIONS in _LOADED.get(pool, ()):
            return None
        loaded = _LOADED.setdefault(pool, set())
        if self.function not in loaded:
            try:
                self.load_function(Redis(connection_pool=pool))
            except (OutOfMemoryError, ReadOnlyError):
                return None
            except ResponseError as error:
                if not no_functions(error, "function"):
                    raise
                loaded.add(_NO_FUNCTIONS)
                return None
            loaded.add(self.function)
        return self.function

    def load_function(self, client: Redis | None = None) -> bool:
        """FUNCTION LOAD this script's library on ``client``'s server (default: its connection's); False when it is not
        :attr:`as_function` or a cluster client's; raises what Redis answers otherwise."""
        client = self._connection if client is None else client
        if self.function is None or getattr(client, "connection_pool", None) is None:
            return False
        try:
            client.function_load(self.library)
        except ResponseError as error:
            if "already exists" not in str(error):
                raise
        return True


class Call(Generic[R]):
    """One invocation of a script, and the one place that picks its transport: FCALL for the pop, EVALSHA on its own
    and on pipelines we execute, EVAL inside a pipeline someone else executes (docs/internals.md, "Transport")."""

    __slots__ = ("args", "keys", "script")

    def __init__(self, script: LuaScript[R], keys: list[str], args: list[Any]) -> None:
        self.script, self.keys, self.args = script, keys, args

    def run(self) -> R:
        """Run it on its own (FCALL or EVALSHA: :meth:`LuaScript.evalsha`) and return the typed result."""
        return self.script.parse(self.script.evalsha(self.keys, self.args))

    def queue(self, pipeline: Pipeline) -> Pipeline:
        """Queue it on ``pipeline`` as EVAL of its built text (a pipeline someone else may execute);
        ``script.parse(reply)`` types its reply. Returns the pipeline, as redis-py's commands do."""
        # execute_command rather than .eval(): a RedisCluster's pipeline has no eval() but routes an EVAL by
        # its keys (all in one slot); on a plain pipeline it is what .eval() sends.
        pipeline.execute_command(  # type: ignore[no-untyped-call]
            "EVAL", self.script.source, len(self.keys), *self.keys, *self.args)
        return pipeline

    def queue_function(self, pipeline: Pipeline) -> Pipeline:
        """Queue it as FCALL on ``pipeline`` (one someone else may execute: rq's job-start MULTI) where its library is
        loaded (:meth:`LuaScript.loaded_function`), else as :meth:`queue` (EVAL): no text hashed nor pieces defined
        at each call. A reply that is :func:`function_lost` did nothing: its reader forgets the pool's functions
        (:func:`forget_functions`) and makes the call again on its own (:meth:`run`)."""
        function = self.script.loaded_function(pipeline)
        if function is None:
            return self.queue(pipeline)
        pipeline.execute_command(  # type: ignore[no-untyped-call]
            "FCALL", function, len(self.keys), *self.keys, *self.args)
        return pipeline

    def queue_loaded(self, pipeline: Pipeline) -> Pipeline:
        """Queue it as EVALSHA on ``pipeline``, one :func:`execute_loaded` or ``execute_riding_oom`` executes (either
        handles NOSCRIPT), the script loaded first if need be; a Redis Cluster's pipeline gets EVAL (per node)."""
        if not hasattr(pipeline, "connection_pool"):
            return self.queue(pipeline)
        self.script.ensure_loaded()
        pipeline.evalsha(self.script.sha, len(self.keys), *self.keys, *self.args)
        return pipeline

    def queue_ours(self, pipeline: Pipeline) -> Pipeline:
        """:meth:`queue_function` where its library is loaded, else :meth:`queue_loaded`: a pipeline ours executes."""
        return self.queue_function(pipeline) if self.script.loaded_function(pipeline) else self.queue_loaded(pipeline)

    def run_or_queue(self, pipeline: Pipeline | None, ours: bool = False) -> R | Pipeline:
        """:meth:`run`, or :meth:`queue` on ``pipeline`` when there is one (rq's convention: ``Queue.remove``);
        ``ours``: a plain pipeline we execute, resending lost calls (``execute_riding_oom``): FCALL, else EVALSHA."""
        if pipeline is None or not ours:
            return self.run() if pipeline is None else self.queue(pipeline)
        return self.queue_ours(pipeline)


def sent_again(args: Sequence[Any]) -> tuple[Any, ...]:
    """An EVALSHA or FCALL Redis lost (NOSCRIPT, "Function not found") as EVAL of its text; all loads forgotten."""
    _LOADED.clear()
    return ("EVAL", _SOURCES[str(args[1])], *args[2:])


def execute_loaded(pipe: Pipeline, run: Callable[[Pipeline], T]) -> T:
    """``run(pipe)``; after a NOSCRIPT or "Function not found" (a restart, a flush: the call did nothing) the same
    commands once more, its EVALSHAs' scripts loaded first, its FCALLs as EVAL (:func:`sent_again`; the libraries
    load again at their next use). The pipeline's other commands must be safe to run twice."""
    stack = list(pipe.command_stack)
    try:
        return run(pipe)
    except ResponseError as error:
        if not (isinstance(error, NoScriptError) or function_lost(error)):
            raise
    stack = [(sent_again(args) if str(args[0]).upper() == "FCALL" else args, options) for args, options in stack]
    shas = {str(args[1]) for args, _ in stack if str(args[0]).upper() == "EVALSHA"}
    _LOADED.pop(pipe.connection_pool, None)
    for sha in shas:
        pipe.script_load(_SOURCES[sha])
    pipe.execute()  # a pipeline's own SCRIPT LOADs, in its MULTI: one round trip (none: nothing sent)
    _LOADED.setdefault(pipe.connection_pool, set()).update(shas)
    pipe.command_stack.extend(stack)
    return run(pipe)
