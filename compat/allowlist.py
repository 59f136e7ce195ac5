"""The allowlist: rq tests that may fail under a variant, each with its reason (``allowlist.txt``)."""

from __future__ import annotations

from pathlib import Path

ALLOWLIST = Path(__file__).with_name("allowlist.txt")


def load_allowlist(path: Path = ALLOWLIST) -> dict[str, dict[str, str]]:
    """variant -> {pytest node id: reason}. A line is ``VARIANT[,VARIANT...] NODE_ID REASON``;
    ``#`` starts a comment line. A malformed line raises ValueError naming the file and line."""
    entries: dict[str, dict[str, str]] = {}
    for number, line in enumerate(path.read_text().splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        parts = line.split(None, 2)
        if len(parts) < 3 or "::" not in parts[1]:
            raise ValueError(f"{path}:{number}: expected 'VARIANT[,VARIANT] NODE_ID REASON', got {line!r}")
        variants, nodeid, reason = parts
        for variant in variants.split(","):
            entries.setdefault(variant, {})[nodeid] = reason.strip()
    return entries
