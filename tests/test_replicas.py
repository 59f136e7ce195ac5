"""Producers confirm each enqueue with replicas (``replicas_to_wait``): against a real primary and a real
replica (``redis-server --replicaof``). With the replica up every producer returns and the replica already
has the job; with it stopped each raises one error naming Redis and the setting, and the job stays queued on
the primary (never dropped)."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest
from conftest import command_calls, wait_for
from redis import Redis
from rq import Queue
from rq.job import Job

from fair_router import FairQueue, FairRouter, Rule, Settings, fair_job
from fair_router.config.settings import SettingsError, load_settings
from fair_router.demo.redis_server import RedisServer, find_redis_server, free_port
from fair_router.routing.router import Route
from fair_router.store.replicas import ReplicasNotAcknowledged, ReplicaWait

ROUTE = Route("replicas.job", "default", (Rule(queue="default_throttled", threshold=100, per=60),))
FAIR_ROUTE = Route("replicas.fair", "fair", (Rule(queue="fair_throttled", threshold=100, per=60),))
SETTINGS = Settings(prefix="replicas", replicas_to_wait=1, replicas_timeout="300ms")


class Replica:
    """A real replica of ``primary``: started, waited for until the primary sees it online, stopped."""

    def __init__(self, primary: RedisServer, directory: Path) -> None:
        self.primary, self.directory = primary, directory
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        self.proc = subprocess.Popen(
            [find_redis_server(), "--port", str(self.port), "--bind", "127.0.0.1", "--dir", str(self.directory),
             "--save", "", "--appendonly", "no",
             "--replicaof", "127.0.0.1", str(self.primary.port), "--loglevel", "warning"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        conn = self.primary.client()
        wait_for(lambda: conn.info("replication").get("slave0", {}).get("state") == "online", 20,
                 "the replica online")
        conn.close()

    def client(self) -> Redis:
        return Redis(host="127.0.0.1", port=self.port)

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait()
            self.proc = None


@pytest.fixture
def replicated(tmp_path: Path) -> Iterator[tuple[RedisServer, Replica]]:
    with RedisServer() as primary:
        replica = Replica(primary, tmp_path)
        replica.start()
        try:
            yield primary, replica
        finally:
            replica.stop()


def enqueue_each_way(conn: Redis, tag: str) -> list[tuple[str, Job | None, Exception | None]]:
    """One enqueue by every producer that confirms (routed one-trip, routed into a FairQueue, enqueue_many,
    the decorator's delay, FairQueue.enqueue): (what, the job or None, the error or None)."""
    router = FairRouter(conn, prefix="replicas", replicas=ReplicaWait(1, 0.3))
    delayed = fair_job("default", rules=[Rule(queue="default_throttled", threshold=100, per=60)],
                       tenant=lambda *args: "acme", connection=conn, settings=SETTINGS, job_key="replicas.delay")
    producers = {
        "routed": lambda: router.enqueue(ROUTE, Queue.parse_args("builtins.print", tag), "acme"),
        "routed fair": lambda: router.enqueue(FAIR_ROUTE, Queue.parse_args("builtins.print", tag), "acme",
                                              fair=True),
        "enqueue_many": lambda: router.enqueue_many(ROUTE, [(Queue.parse_args("builtins.print", tag), "acme")])[0],
        "delay": lambda: delayed(print).delay(tag),
        "FairQueue.enqueue": lambda: FairQueue("fairq", connection=conn, settings=SETTINGS).enqueue(
            "builtins.print", tag, fair_tenant="acme"),
    }
    done: list[tuple[str, Job | None, Exception | None]] = []
    for what, produce in producers.items():
        try:
            done.append((what, produce(), None))
        except ReplicasNotAcknowledged as exc:
            done.append((what, None, exc))
    return done


def test_an_acknowledged_enqueue_is_on_the_replica(replicated: tuple[RedisServer, Replica]) -> None:
    primary, replica = replicated
    conn, copy = primary.client(), replica.client()
    before = command_calls(conn, "wait")
    done = enqueue_each_way(conn, "up")
    assert [error for _, _, error in done] == [None] * 5
    for what, job, _ in done:
        assert job is not None and copy.exists(job.key), what  # WAIT returned: the replica has it already
        assert job.id in Queue(job.origin, connection=copy).get_job_ids(), what
    assert command_calls(conn, "wait") - before == 5  # one WAIT per enqueue


def test_without_the_replica_each_producer_raises_and_keeps_the_job(
        replicated: tuple[RedisServer, Replica]) -> None:
    primary, replica = replicated
    conn = primary.client()
    replica.stop()
    done = enqueue_each_way(conn, "down")
    assert [what for what, job, error in done if job is not None or error is None] == []
    for what, _, error in done:
        assert isinstance(error, ReplicasNotAcknowledged), what
        message = str(error)
        assert f"Redis at 127.0.0.1:{primary.port}/0" in message and "0 of 1 replica(s)" in message, message
        assert "replicas_to_wait" in message and "FAIR_ROUTER_REPLICAS_TO_WAIT" in message, message
        (job_id,) = error.job_ids
        job = Job.fetch(job_id, connection=conn)  # saved and queued on the primary: never dropped
        assert job.get_status() == "queued", what
        assert job_id in Queue(job.origin, connection=conn).get_job_ids(), what
    # the routed ones are still recorded in the tenant's window (the job exists: nothing to take back)
    assert FairRouter(conn, prefix="replicas").peek(ROUTE, "acme").counts == [2]


def test_no_wait_is_sent_by_default(replicated: tuple[RedisServer, Replica]) -> None:
    primary, replica = replicated
    conn = primary.client()
    replica.stop()
    router = FairRouter(conn, prefix="replicas")
    router.enqueue(ROUTE, Queue.parse_args("builtins.print", "x"), "acme")
    FairQueue("fairq", connection=conn, settings=Settings(prefix="replicas")).enqueue("builtins.print", "x",
                                                                                        fair_tenant="acme")
    assert command_calls(conn, "wait") == 0


def test_the_settings_are_validated(monkeypatch: pytest.MonkeyPatch, isolated_settings: None) -> None:
    monkeypatch.setenv("FAIR_ROUTER_REPLICAS_TO_WAIT", "2")
    monkeypatch.setenv("FAIR_ROUTER_REPLICAS_TIMEOUT", "250ms")
    settings = load_settings()
    assert (settings.replicas_to_wait, settings.replicas_timeout) == (2, 0.25)
    assert (ReplicaWait.of(settings).replicas, ReplicaWait.of(settings).timeout) == (2, 0.25)
    monkeypatch.setenv("FAIR_ROUTER_REPLICAS_TO_WAIT", "-1")
    with pytest.raises(SettingsError, match=r"FAIR_ROUTER_REPLICAS_TO_WAIT.*greater than or equal to 0"):
        load_settings()
    with pytest.raises(ValueError, match="replicas_to_wait"):
        ReplicaWait(-1)
