"""The training dataset (data/dataset.py): an empty train file or a query without negatives is a clear error."""

from __future__ import annotations


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
