"""Training: trainer, temperature schedules and cross-process helpers."""
