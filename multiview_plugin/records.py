"""The JSON form of run rows (the quickstart's ``results.json``) and of the run records made from them
(``results/<data>/<name>.json``, written by the repository's reporting tool, ``python -m tools.reporting add``):
indented, with each list of plain integers (the per-question ranks) on one line, so records stay short and
diff by row."""

from __future__ import annotations

import json
import re
from typing import Any

_INT_LIST = re.compile(r"\[\s*-?\d+(?:,\s*-?\d+)*\s*\]")


def dumps_rows(obj: Any) -> str:
    """``json.dumps(obj, indent=2)`` with every list of plain integers (the per-question ranks) on one line.

    >>> print(dumps_rows({"ranks": [1, 2, 3]}))
    {
      "ranks": [1, 2, 3]
    }
    """
    return _INT_LIST.sub(lambda m: "[" + ", ".join(m.group(0)[1:-1].split()).replace(",,", ",") + "]",
                         json.dumps(obj, indent=2))
