"""DCSR's sentence-level training data (data/sentence_dataset.py)."""

from __future__ import annotations

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.registry import get_encoder_class


def test_dcsr_sampler_skips_an_empty_hard_negative(tiny_bert):
    from multiview_plugin.data.sentence_dataset import SentenceTrainDataset

    model = get_encoder_class("dcsr").build(ModelArguments(model_name_or_path=str(tiny_bert), model_name="dcsr"),
                                            DataArguments(pad_to_multiple_of=None, passage_max_len=64))
    rec = {"query_id": "q", "query": "who built paris", "answers": ["river"], "positive_docids": ["d0"],
           "positives": ["paris is the capital. it was built on the river. it is old."],
           "negative_docids": ["e", "d1"], "negatives": ["", "london is the capital of england."],
           "negative_sentences": [-1, -1], "source": "t.jsonl:1"}
    ds = SentenceTrainDataset([rec], model.formatter, in_passage_negatives=0, bm25_negatives=2)
    for epoch in range(3):  # every epoch's window lands on the non-empty passage
        ds.set_epoch(epoch)
        item = ds[0]
        assert len(item["passages"]) == 3 and all(item["passages"][1:])
