"""The demo scenario (`fair-router demo`): a flood on an embedded Redis, its metrics and plot."""
