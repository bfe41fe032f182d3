"""Quickstart: a small embedded demo dataset (:mod:`multiview_plugin.quickstart.dataset`) for the README's
train -> encode -> search -> evaluate walk-through."""
