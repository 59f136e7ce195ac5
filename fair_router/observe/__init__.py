"""Observability, the writing side: start records, counters and routed waiting counts, written by workers and
producers (docs/internals.md, "Observability"); :mod:`fair_router.dashboard` reads them back."""
