"""torchrun encoding: N processes each encode their shards, byte-identical to sequential runs."""

import pytest
import torch

from multiview_plugin.arguments import DataArguments, ModelArguments
from multiview_plugin.driver.encode import main as encode_main
from multiview_plugin.encoding.parallel import LaunchRank, launch_rank, rank_shards, shard_output_path
from multiview_plugin.errors import ConfigError
from multiview_plugin.registry import get_encoder_class
from tests.conftest import write_topics_corpus
from tests.training.test_distributed import torchrun


def test_rank_helpers():
    assert launch_rank({}) == LaunchRank(0, 1, 0)
    launch = launch_rank({"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1"})
    assert launch.parallel and rank_shards(5, launch) == [1, 3]
    assert rank_shards(2, launch_rank({"RANK": "0", "WORLD_SIZE": "2"})) == [0]
    assert str(shard_output_path("emb/corpus.pkl", 3)) == "emb/corpus.3.pkl"
    with pytest.raises(ConfigError, match="smaller than"):
        rank_shards(1, launch)
    with pytest.raises(ConfigError, match="RANK 2"):
        launch_rank({"RANK": "2", "WORLD_SIZE": "2"})


def test_torchrun_shards_equal_sequential_byte_for_byte(tiny_bert, tmp_path):
    torch.manual_seed(0)
    model = get_encoder_class("mvr").build(
        ModelArguments(model_name_or_path=str(tiny_bert), model_name="mvr", mvr_num_views=3),
        DataArguments(pad_to_multiple_of=None, passage_max_len=32))
    model.save(tmp_path / "mvr")
    corpus = write_topics_corpus(tmp_path / "corpus.jsonl")
    common = ["--model_name_or_path", str(tmp_path / "mvr"), "--dataset_path", str(corpus),
              "--dataset_number_of_shards", "3", "--per_device_eval_batch_size", "2", "--device", "cpu"]
    for i in range(3):
        assert encode_main([*common, "--dataset_shard_index", str(i),
                            "--encode_output_path", str(tmp_path / "seq" / f"corpus.{i}.pkl")]) == 0
    out = tmp_path / "par" / "corpus.pkl"
    proc = torchrun(["-m", "multiview_plugin.driver.encode", *common, "--encode_output_path", str(out)])
    assert proc.returncode == 0, proc.stdout + proc.stderr[-3000:]
    for i in range(3):
        for suffix in ("", ".json"):
            seq = (tmp_path / "seq" / f"corpus.{i}.pkl{suffix}").read_bytes()
            assert (tmp_path / "par" / f"corpus.{i}.pkl{suffix}").read_bytes() == seq, (i, suffix)
    # rerun: every shard is complete, nothing is re-encoded
    mtimes = [(tmp_path / "par" / f"corpus.{i}.pkl").stat().st_mtime_ns for i in range(3)]
    proc = torchrun(["-m", "multiview_plugin.driver.encode", *common, "--encode_output_path", str(out)])
    assert proc.returncode == 0 and "is complete" in proc.stderr
    assert [(tmp_path / "par" / f"corpus.{i}.pkl").stat().st_mtime_ns for i in range(3)] == mtimes
