"""Interruptible iteration: a long generator job gives up its worker at a checkpoint once its time slice is used,
and resumes from its saved cursor in its next turn (docs/interruptible.md). Imports nothing."""
