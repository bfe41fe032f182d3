"""Search topics: the queries a run is made for, by qid, from any query file the drivers accept."""

from __future__ import annotations

from multiview_plugin.data.readers import PathLike, first_nonblank_line, load_queries


def load_topics(path: PathLike) -> dict[str, str]:
    """Queries by qid. DPR QA files (``question<TAB>[answers]`` or jsonl ``{"question", "answer"}``) have no
    ids: their qids are 0-based line numbers, as in Pyserini, so runs line up with their answers."""
    first = first_nonblank_line(path)
    cells = first.rstrip("\n").split("\t")
    is_dpr = (len(cells) == 2 and cells[1].lstrip('"').startswith("[")) or (
        first.lstrip().startswith("{") and '"question"' in first)
    if is_dpr:
        from multiview_plugin.data.answers import load_qa  # questions read with their answers

        return load_qa(path)[0]
    return load_queries(path)


def topic_lines(queries: dict[str, str]) -> list[str]:
    """``qid<TAB>text`` lines of a topics ``.tsv`` (whitespace inside a query, tabs and newlines included, becomes
    one space): the format stock Pyserini's ``--topics`` reads from a local file, beside the ``.jsonl``."""
    return [f"{qid}\t{' '.join(text.split())}" for qid, text in queries.items()]
