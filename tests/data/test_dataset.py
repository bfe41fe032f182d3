"""The training dataset (data/dataset.py): an empty train file or a query without negatives is a clear error."""

from __future__ import annotations

import json

import pytest

from multiview_plugin.arguments import DataArguments


def test_empty_train_file_and_query_without_negatives(tiny_bert, tmp_path, capsys):
    from multiview_plugin.driver.train import main as train_main

    path = tmp_path / "data" / "train.jsonl"
    path.parent.mkdir()
    argv = ["--model_name", "dpr", "--model_name_or_path", str(tiny_bert), "--dataset_path", str(path),
            "--output_dir", str(tmp_path / "out"), "--train_group_size", "2", "--report_to", "none"]
    path.write_text("\n")
    assert train_main(argv) == 2
    assert f"{path}: the training file is empty" in capsys.readouterr().err
    path.write_text('{"query_id": "0", "query": "who", "positive_passages": [{"docid": "d0", "text": "paris"}], '
                    '"negative_passages": [{"docid": "d1", "text": "rome"}]}\n'
                    '{"query_id": "1", "query": "what", "positive_passages": [{"docid": "d0", "text": "paris"}]}\n')
    assert train_main(argv) == 2
    err = capsys.readouterr().err
    # refused while loading (nothing trained), naming the file with its folder
    assert f"{path} line 2: field 'negative_passages': --train_group_size 2 needs hard negatives" in err
    assert not (tmp_path / "out").exists()


def test_num_proc_loads_and_validates_hub_datasets_in_processes(train_file, tmp_path, monkeypatch):
    """--num_proc reaches datasets (load_dataset and the validating map, as Tevatron's load_dataset), and a bad
    record found in a worker process still gives its file, line and field (the error pickles whole)."""
    import datasets

    from multiview_plugin.data.dataset import load_hub_train_records
    from multiview_plugin.data.readers import InputFormatError

    seen = []
    real_load, real_map = datasets.load_dataset, datasets.Dataset.map
    monkeypatch.setattr(datasets, "load_dataset", lambda *a, **k: seen.append(("load", k.get("num_proc")))
                        or real_load(*a, **k))
    monkeypatch.setattr(datasets.Dataset, "map", lambda self, *a, **k: seen.append(("map", k.get("num_proc")))
                        or real_map(self, *a, **k))
    records = load_hub_train_records(DataArguments(dataset_path=str(train_file), num_proc=2,
                                                   dataset_cache_dir=str(tmp_path / "c1")))
    assert len(records) == 16 and ("load", 2) in seen and ("map", 2) in seen
    lines = train_file.read_text().splitlines()
    bad = json.loads(lines[12])
    bad["query"] = None
    lines[12] = json.dumps(bad)
    (tmp_path / "bad.jsonl").write_text("\n".join(lines) + "\n")
    with pytest.raises(InputFormatError, match="line 13: field 'query'"):
        load_hub_train_records(DataArguments(dataset_path=str(tmp_path / "bad.jsonl"), num_proc=2,
                                             dataset_cache_dir=str(tmp_path / "c2")))
