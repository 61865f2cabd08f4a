"""Widgets of the job region of the wizard."""
