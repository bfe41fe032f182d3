"""Encoding corpora and queries into Tevatron-format shards."""

from multiview_plugin.encoding.shards import ShardInfo, ShardWriter, read_shard, shard_is_complete, split_lookup

__all__ = ["ShardInfo", "ShardWriter", "read_shard", "shard_is_complete", "split_lookup"]
