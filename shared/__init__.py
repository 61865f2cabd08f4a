"""The wire contract between agent and controller, and pure planning knowledge (no I/O)."""
