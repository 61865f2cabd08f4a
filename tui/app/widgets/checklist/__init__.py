"""Widgets of the checklist region of the wizard."""
