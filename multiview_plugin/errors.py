"""User-facing errors: the command-line drivers print their message (no traceback) and exit with status 2."""

from __future__ import annotations


class MultiViewError(Exception):
    """Base of errors caused by input or configuration, not by a bug."""


class ConfigError(MultiViewError, ValueError):
    """An option or option combination the method cannot run with."""


class UnknownNameError(MultiViewError, KeyError):
    """An unregistered model or loss name."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0]) if self.args else ""


def unsafe_weights_message(where: object, err: BaseException) -> str:
    """torch's 40-line refusal of a weights pickle (``pytorch_model.bin``, an adapter's ``.bin``) that names a
    global it does not allow (e.g. ``os.system``), as one line naming ``where`` and the global."""
    import re

    found = re.search(r"GLOBAL (\S+)", str(err))
    named = f" names {found.group(1)}, which" if found else ""
    return (f"{where}: a weights file (pickle){named} is not a plain tensor and could run code when loaded: "
            "refusing to load it (torch.load weights_only). Use the model's safetensors weights, or re-save it "
            "from a copy you trust")
