"""Reporting: the committed run records under ``results/`` and the tables and prose numbers generated or checked
from them (docs/results.md, the README).

- :mod:`.records`: reading records, a run's settings from its command, seed groups, paired tests against dpr
- :mod:`.tables`: the table renderers, with the names and rows of ``results/presentation.json``
- :mod:`.plots`: training curves
- :mod:`.pages`: splicing tables into the pages between their markers; ``render`` and ``check``
- :mod:`.prose`: numbers in prose tagged with the record field they quote, checked against it

Command line: ``python -m tools.reporting add|render|check|check-quickstart`` (``--help``).
"""
