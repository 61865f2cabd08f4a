"""Widgets of the launch region of the wizard."""
