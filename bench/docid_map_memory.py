"""Peak memory of loading an index folder's row → document map, per index row (the figure recipes/plan.py adds).

Search and the build-time calibration read the ``docid`` file (one ``docid#j`` line per row) and turn it into the
docid of each document and the document of each row (``split_lookup`` + ``contiguous_docs``, as
``MultiVectorSearcher`` and ``calibrate_index`` do). This writes such a file for ``--docs`` documents of
``--views`` views (8-digit docids, as in DPR's 21M-passage Wikipedia) and measures the peak RSS of that load
above the RSS before it, in a fresh process.

    python bench/docid_map_memory.py --docs 250000 --views 8 > bench/docid_map_memory.log
"""

from __future__ import annotations

import argparse
import json
import resource
import tempfile
from pathlib import Path

from multiview_plugin.encoding.shards import split_lookup
from multiview_plugin.index.adds import contiguous_docs


def rss_mib() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--docs", type=int, default=250_000)
    p.add_argument("--views", type=int, default=8)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "docid"
        with path.open("w", encoding="utf-8") as f:
            for i in range(args.docs):
                f.write("".join(f"{20_000_000 + i}#{j}\n" for j in range(args.views)))
        before = rss_mib()
        peak_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        lookup = path.read_text(encoding="utf-8").splitlines()
        docids, row_doc = contiguous_docs(split_lookup(lookup, True), str(path))
        del lookup
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
        kept = rss_mib() - before
    rows = args.docs * args.views
    assert peak > peak_before, "the load must raise the peak for the measurement to count"
    print(json.dumps({"docs": args.docs, "views": args.views, "rows": rows, "documents_loaded": len(docids),
                      "peak_mib_above_start": round(peak - before, 1), "kept_mib": round(kept, 1),
                      "peak_bytes_per_row": round((peak - before) * 2**20 / rows, 1),
                      "kept_bytes_per_row": round(kept * 2**20 / rows, 1), "row_doc_bytes_per_row": 8}))


if __name__ == "__main__":
    main()
