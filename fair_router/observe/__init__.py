"""Observability, the writing side: start records, counters, routed waiting counts (docs/internals.md)."""
