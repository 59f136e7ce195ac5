"""What a benchmark reads off a Redis server about its own work: ``INFO commandstats`` and ``INFO cpu``.

Shared by bench/scale.py, bench/worker.py and bench/capacity.py. Redis counts a command a script or a
MULTI runs both on its own line (calls and usec) and inside the EVAL/EVALSHA/EXEC that ran it (usec), so
summing every line's usec counts that time twice: :class:`Usage` keeps the two apart.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from redis import Redis

NOT_JOBS = ("cmdstat_info", "cmdstat_config|resetstat", "cmdstat_config", "cmdstat_flushdb", "cmdstat_flushall")
"""The benchmark's own reads and resets: never part of a job's cost."""
CONTAINERS = ("cmdstat_eval", "cmdstat_evalsha", "cmdstat_fcall", "cmdstat_exec")
"""Commands whose usec includes the commands they ran (each also counted on its own line)."""
SCRIPTS = ("cmdstat_eval", "cmdstat_evalsha", "cmdstat_fcall")


def pop_stat(stats: dict[str, Any]) -> dict[str, Any]:
    """The fair pop's line of ``INFO commandstats``: FCALL, its only Redis function, where the server has
    functions (Redis >= 7); else EVALSHA, the workers' only EVALSHA besides the rare park. Zeros if none ran."""
    for name in ("cmdstat_fcall", "cmdstat_evalsha"):
        if name in stats:
            return dict(stats[name])
    return {"calls": 0, "usec": 0.0, "usec_per_call": 0.0}


def server_cpu(conn: Redis) -> float:
    """Seconds of CPU the redis-server process used so far (user + system): its whole cost, I/O included."""
    info = conn.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


def commands_so_far(conn: Redis) -> int:
    """Commands the server has executed (all clients, those scripts run included)."""
    return sum(int(stat["calls"]) for stat in conn.info("commandstats").values())


@dataclass(frozen=True)
class Usage:
    """The server's work between two readings (``INFO commandstats`` deltas and ``INFO cpu``)."""

    stats: dict[str, dict[str, float]]
    """Per ``cmdstat_<name>``: calls and usec."""
    cpu: float
    """Seconds of server CPU (user + system)."""

    @classmethod
    def now(cls, conn: Redis) -> Usage:
        raw: dict[str, Any] = conn.info("commandstats")
        stats = {name: {"calls": float(value["calls"]), "usec": float(value["usec"])} for name, value in raw.items()}
        return cls(stats, server_cpu(conn))

    def __sub__(self, before: Usage) -> Usage:
        empty = {"calls": 0.0, "usec": 0.0}
        stats = {name: {field: value[field] - before.stats.get(name, empty)[field] for field in ("calls", "usec")}
                 for name, value in self.stats.items() if name not in NOT_JOBS}
        return Usage({name: value for name, value in stats.items() if value["calls"] > 0}, self.cpu - before.cpu)

    @property
    def commands(self) -> float:
        """Commands as Redis counts them: those run by scripts and inside MULTI included, MULTI/EXEC too."""
        return sum(value["calls"] for value in self.stats.values())

    @property
    def command_usec(self) -> float:
        """Microseconds the commands themselves took (every line but the containers: each counted once)."""
        return sum(value["usec"] for name, value in self.stats.items() if name not in CONTAINERS)

    @property
    def script_usec(self) -> float:
        """Microseconds in EVAL/EVALSHA (the Lua run and the commands it called)."""
        return sum(value["usec"] for name, value in self.stats.items() if name in SCRIPTS)

    def top(self, per: float, n: int = 8) -> list[tuple[str, float]]:
        """The ``n`` most called commands, calls per ``per`` (e.g. per job)."""
        rows = sorted(((name.removeprefix("cmdstat_"), value["calls"] / per) for name, value in self.stats.items()),
                      key=lambda row: -row[1])
        return rows[:n]
