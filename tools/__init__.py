"""Repository tools, not installed with the package; run them from the repository root
(``python -m tools.reporting check``, ``python tools/tevatron_flags.py``)."""
