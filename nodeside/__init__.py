"""The code that runs on a node during a launch, outside the agent daemon: the node helper and process matching.

Why a package of its own, beside ``agent/`` (the daemon), ``tui/`` (the controller) and ``shared/`` (the contract):

- **It runs where nothing is installed.** The controller ships it over the same SSH (or ``srun``) exec that runs
  it, under the node's plain training interpreter with ``-I -S``: so every module here is standard library only
  and Python 3.8+ (a test checks both). The agent daemon's modules (FastAPI, pydantic, psutil) cannot be that.
- **It is shipped as files, not spliced.** :mod:`tui.launch.nodecode` packs this package's files, together with
  the ``shared/`` modules they import (:mod:`shared.nodewire`, the wire rules both sides use, and
  :mod:`shared.logprefix`, the rank prefix of log lines), into one bundle
  (:func:`nodeside.boot.pack`), and :mod:`nodeside.boot` imports them from it on the node: the same modules the
  tests and the daemon import.
- **Both sides of the node reuse it.** The helper (:mod:`nodeside.helper`) and the agent daemon's reaper
  (:mod:`agent.reaper`) find a run's processes with one reader (:mod:`nodeside.procmatch`); the controller never
  imports the daemon's package to reach them.

``python3 -m nodeside COMMAND ...`` runs the helper where the package is installed (see :mod:`nodeside.helper`).
"""
