"""The screens (one per wizard step, plus dialogs) of the wizard."""
