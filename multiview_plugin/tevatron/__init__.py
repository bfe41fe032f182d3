"""Multi-view methods inside Tevatron v2's own training loop (``pip install multiview_plugin[tevatron]`` plus
Tevatron v2 from source; it is not on PyPI).

    python -m multiview_plugin.tevatron.train --model_name mvr <any Tevatron v2 train flag>

Tevatron has no model registry (its drivers hard-code ``DenseModel``), so this driver makes Tevatron do the rest
of the work: its argument dataclasses (extended with our method options), its ``TrainDataset`` for group
sampling, its ``TevatronTrainer`` (subclassed to save and resume in our model format). Nothing here is imported
by the rest of the package; importing :mod:`multiview_plugin.tevatron.train` imports Tevatron.
"""
