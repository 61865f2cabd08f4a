"""ftwiz controller: CLI, agent client, checklist, SSH launcher and the Textual wizard."""
