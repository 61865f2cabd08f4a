"""Widgets of the cluster region of the wizard."""
