"""The ground floor: the shared vocabulary, importing nothing of fair-router above it (docs/internals.md, "Floors")."""
