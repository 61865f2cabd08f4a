"""ftwiz version, shared by agent and controller (equal versions are a checklist item)."""

__version__ = "0.1.0"
