"""Training: the trainer, GradCache, checkpoints and run settings."""
