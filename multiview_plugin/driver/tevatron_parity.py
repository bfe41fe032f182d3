"""Tevatron v2 flag parity tables; they live in :mod:`multiview_plugin.tevatron_parity` (re-exported here). The
parity table writer is ``tools/tevatron_flags.py``."""

from multiview_plugin.tevatron_parity import (
    CONDITIONAL_TRAIN,
    DIFFERENCES,
    ENCODE_ONLY,
    NOTES,
    REFUSED,
    REFUSED_ENCODE,
    REFUSED_SEARCH,
    REFUSED_TRAIN,
    flag_name,
    refuse_unsupported,
)

__all__ = ["CONDITIONAL_TRAIN", "DIFFERENCES", "ENCODE_ONLY", "NOTES", "REFUSED", "REFUSED_ENCODE", "REFUSED_SEARCH",
           "REFUSED_TRAIN", "flag_name", "refuse_unsupported"]
