"""Widgets of the common region of the wizard."""
