"""``fair-router check``'s look beyond the file: the settings' cross-references, the environment and, with ``--ping`` /
``--deep``, the Redis server (exit statuses in docs/api.md)."""

from __future__ import annotations

import os
from collections.abc import Callable

import click
from redis import Redis
from redis.exceptions import NoPermissionError, RedisError, ResponseError
from rq import Queue

from fair_router.commands.failures import fail
from fair_router.config.crosscheck import Finding, cross_check, unknown_variables
from fair_router.config.settings import Settings
from fair_router.core.keys import Keys
from fair_router.core.text import as_text
from fair_router.dashboard.iterations import known_queues
from fair_router.fairqueue.marks import FairnessMarks
from fair_router.fairqueue.scripts import FairPopScript
from fair_router.fairqueue.stale import PlainPops
from fair_router.store.cluster import ClusterSetupError, connections_for
from fair_router.store.luascript import no_functions, script_names, sent_text
from fair_router.store.serverconf import policy_readings
from fair_router.workers.pool import redact_url

OLDEST_TESTED = (6, 2)


def server_findings(settings: Settings, deep: bool) -> list[Finding]:
    """The settings' Redis: version, stored tiers and, with ``deep``, every script loaded; unreachable exits 1."""
    url = redact_url(settings.redis_url)
    try:  # on a Redis Cluster: our state through a RedisCluster, the version from the owner of rq's slot
        pair = connections_for(settings.redis_url, settings.redis_cluster, socket_connect_timeout=5, socket_timeout=10)
    except ClusterSetupError as exc:
        fail(f"error: {exc}")
    connection = pair.state
    try:
        connection.ping()
        version = str(pair.rq.info("server").get("redis_version", "?"))  # from the owner of rq's slot
    except NoPermissionError:  # a user that may not run INFO (an ACL)
        version = "?"
    except (RedisError, OSError) as exc:
        fail(f"error: redis_url {url}: cannot reach Redis ({exc})", 1)
    click.echo(f"redis:     {url} answers, Redis {version}")
    findings: list[Finding] = []
    numbers = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if len(numbers) == 2 and numbers < OLDEST_TESTED:
        findings.append(Finding("warning", f"redis_url {url}", f"Redis {version} is older than 6.2, which is the "
                                "oldest fair-router is tested on"))
    findings.extend(_memory_policies(pair.state, pair.rq, settings))
    findings.extend(_stored_tiers(connection, settings))
    findings.extend(_plain_pops(connection, settings))
    if deep:
        failed, function = _load_scripts(connection)
        if failed:
            for finding in failed:
                click.echo(str(finding), err=True)
            fail(f"error: {len(failed)} script(s) do not load on Redis {version} at {url}", 1)
        pop = ("as a Redis function (FUNCTION LOAD)" if function
               else "as EVALSHA (Redis < 7, FUNCTION not allowed, or a cluster)")
        click.echo(f"scripts:   {len(script_names())} loaded (SCRIPT LOAD); the fair pop {pop}")
    return findings


def _memory_policies(state: Redis, rq: Redis, settings: Settings) -> list[Finding]:
    """Every server's ``maxmemory-policy``: an error where Redis may evict keys, a warning where INFO does not say."""
    clients: list[Redis] = [state, rq]
    for shard_url in dict.fromkeys(settings.shard_urls):
        clients.append(Redis.from_url(shard_url, socket_connect_timeout=5, socket_timeout=10))
    try:
        readings = policy_readings(clients)
    except (RedisError, OSError) as exc:
        fail(f"error: a shard server of shard_urls cannot be reached ({exc})", 1)
    findings = [Finding("error" if reading.evicts else "warning", "maxmemory-policy", reading.describe())
                for reading in readings if reading.evicts or not reading.safe]
    if all(reading.safe for reading in readings):
        click.echo(f"memory:    maxmemory-policy noeviction on {len(readings)} server(s)")
    return findings


def _stored_tiers(connection: Redis, settings: Settings) -> list[Finding]:
    """Tenants whose stored tier is no tier of these settings (they are served as ``tiers.default``)."""
    known = set(settings.tiers.concurrency)
    raw = connection.hgetall(Keys(settings.prefix).tiers())
    stored = {as_text(tenant): as_text(tier) for tenant, tier in raw.items()}
    unknown = sorted((tenant, tier) for tenant, tier in stored.items() if tier not in known)
    if not unknown:
        return []
    shown = ", ".join(f"{tenant!r}: {tier!r}" for tenant, tier in unknown[:5]) + (" ..." if len(unknown) > 5 else "")
    return [Finding("warning", "tiers", f"{len(unknown)} tenant(s) have a tier stored in Redis that is not a key of "
                    f"tiers.concurrency ({shown}); they are served as tier {settings.tiers.default!r}")]


def _plain_pops(connection: Redis, settings: Settings) -> list[Finding]:
    """A warning per fair queue whose jobs a plain rq worker took (looking also tidies an empty queue's counts)."""
    names = list(dict.fromkeys([*settings.fair_queue_names(), *known_queues(connection)]))
    marked = FairnessMarks(connection, settings.prefix).read(names)
    pops, findings = PlainPops(connection), []
    for name in names:
        if name in marked or settings.is_fair(name):
            keys = Keys(marked.get(name, settings.prefix)).fair_queue(Queue.redis_queue_namespace_prefix + name)
            found = pops.check(name, keys)
            if found.plain:
                findings.append(Finding("warning", f"queue {name}", found.describe()))
    return findings


def _load_scripts(connection: Redis) -> tuple[list[Finding], bool]:
    """Load every script and the fair pop's library: what failed, and whether the pop runs as a function here."""
    failed, function = [], False
    for name in script_names():
        try:
            connection.script_load(sent_text(name))  # byte for byte what workers and producers send
        except RedisError as exc:
            failed.append(Finding("error", f"lua/{name}.lua", f"SCRIPT LOAD failed: {exc}"))
    try:  # False where functions are unavailable or denied
        function = FairPopScript(connection).load_function()
    except RedisError as exc:
        if not (isinstance(exc, ResponseError) and no_functions(exc, "function")):
            failed.append(Finding("error", "lua/fair_pop.lua", f"FUNCTION LOAD failed: {exc}"))
    return failed, function


def report(settings: Settings, source: str, server: Callable[[], list[Finding]] | None = None) -> None:
    """Print the findings and a verdict (exit 2 on an error); ``server`` runs only when the settings have no error."""
    findings = [*cross_check(settings, source), *unknown_variables(os.environ)]
    if server is not None and not any(finding.level == "error" for finding in findings):
        findings += server()
    errors = [finding for finding in findings if finding.level == "error"]
    warnings = [finding for finding in findings if finding.level == "warning"]
    for finding in [*errors, *warnings]:
        click.echo(str(finding), err=True)
    if errors:
        fail(f"\nsettings have {len(errors)} error(s)" + (f" and {len(warnings)} warning(s)" * bool(warnings)))
    click.echo(f"\nsettings OK, with {len(warnings)} warning(s) above" if warnings else "\nsettings OK")
