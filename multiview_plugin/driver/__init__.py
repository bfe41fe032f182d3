"""Command-line drivers (``python -m multiview_plugin.driver.<name>``)."""
