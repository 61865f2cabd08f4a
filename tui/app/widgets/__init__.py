"""Widgets, one per file, in a folder per region of the wizard."""
