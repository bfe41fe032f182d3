"""Progress bars that honour the user's tqdm settings.

tqdm reads ``TQDM_*`` environment variables (``TQDM_DISABLE=1`` hides every bar) only for the arguments a call does
not pass: a call that passes ``disable=False`` shows its bar whatever the environment says. :func:`progress_bar`
passes ``disable`` only to hide a bar the caller does not want (``enabled=False``, e.g. ``--quiet``).
"""

from __future__ import annotations

from typing import Any

from tqdm import tqdm


def progress_bar(iterable: Any = None, *, enabled: bool = True, **kwargs: Any) -> tqdm:
    """``tqdm(iterable, **kwargs)``, hidden when ``enabled`` is False; when enabled, tqdm's environment settings
    (``TQDM_DISABLE``, ``TQDM_MININTERVAL``, …) apply.

    >>> import io
    >>> bar = progress_bar(range(3), enabled=False, file=io.StringIO())
    >>> bar.disable, list(bar)
    (True, [0, 1, 2])
    """
    if not enabled:
        kwargs["disable"] = True
    return tqdm(iterable, **kwargs)
