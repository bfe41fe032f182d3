"""How high can MVR's view perplexity go on the SQuAD-dev protocol? The ceiling the data sets, measured.

View perplexity (MVR paper eq. 10, ``multiview_plugin.scoring.view_perplexity``) is computed per passage over the
questions that ask about it, then averaged over passages: a passage asked n questions has perplexity at most
min(n, k). This script prints, over the protocol's evaluation questions (articles 32-47 of SQuAD v1.1 dev, as
``python -m multiview_plugin.quickstart --data squad`` splits them), for k = 8 views:

- the bound min(n, k), every question of a passage won by a different view;
- the perplexity if each question were won by the view holding its answer: the answer's sentence (as
  ``--mvr_view_init sentences`` assigns sentences to views: sentence i to view i, sentences k-1.. to the last) and
  the answer's token segment (``--mvr_view_init segments``: k near-equal segments of the passage's first
  ``--passage_max_len`` tokens, title included).

    python bench/view_ppl_ceiling.py --squad_path ../shared/data/squad/dev-v1.1.json > bench/view_ppl_ceiling.log
"""

from __future__ import annotations

import argparse
import json
import math
from collections import Counter, defaultdict

from transformers import AutoTokenizer

from multiview_plugin.backbones import resolve_backbone
from multiview_plugin.data.sentences import split_sentences


def perplexity(counts: Counter) -> float:
    total = sum(counts.values())
    return math.exp(-sum(c / total * math.log(c / total) for c in counts.values()))


def sentence_index(text: str, answer_start: int) -> int:
    """The index of the sentence (pysbd, as the views use) that holds character ``answer_start`` of ``text``."""
    pos = 0
    for i, sentence in enumerate(split_sentences(text)):
        start = text.find(sentence, pos)
        end = start + len(sentence)
        if start <= answer_start < end:
            return i
        pos = end
    return i


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--squad_path", required=True, help="SQuAD v1.1 dev json")
    p.add_argument("--eval_articles", default="32-47", help="first-last article index of the evaluation split")
    p.add_argument("--views", type=int, default=8, help="k, MVR's number of views")
    p.add_argument("--passage_max_len", type=int, default=192, help="tokens of a passage the model reads")
    p.add_argument("--model", default="sentence-transformers/all-MiniLM-L6-v2", help="tokenizer")
    args = p.parse_args()
    first, last = (int(x) for x in args.eval_articles.split("-"))
    tok = AutoTokenizer.from_pretrained(resolve_backbone(args.model))
    k = args.views
    sent: dict[int, Counter] = defaultdict(Counter)
    seg: dict[int, Counter] = defaultdict(Counter)
    n_questions: Counter = Counter()
    pid = 0
    data = json.load(open(args.squad_path, encoding="utf-8"))["data"]
    for article in data[first:last + 1]:
        title = article["title"].replace("_", " ")
        for para in article["paragraphs"]:
            pid += 1
            text = para["context"]
            joined = f"{title} {text}"
            enc = tok(joined, truncation=True, max_length=args.passage_max_len, return_offsets_mapping=True,
                      add_special_tokens=False)
            offsets = enc["offset_mapping"]
            for qa in para["qas"]:
                start = qa["answers"][0]["answer_start"]
                n_questions[pid] += 1
                sent[pid][min(sentence_index(text, start), k - 1)] += 1
                char = start + len(title) + 1
                rank = next((r for r, (a, b) in enumerate(offsets) if b > char), len(offsets))
                n = len(offsets)
                seg[pid][min(rank * k // n, k - 1) if rank < n else -1] += 1  # -1: answer past the tokens read
    passages = sorted(n_questions)
    mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
    print(f"passages {len(passages)}  questions {sum(n_questions.values())}  "
          f"questions per passage {mean([n_questions[p] for p in passages]):.2f}  views k={k}")
    print(f"bound min(n, k), every question a different view: {mean([min(n_questions[p], k) for p in passages]):.2f}")
    print(f"each question won by its answer's sentence view: {mean([perplexity(sent[p]) for p in passages]):.2f}")
    print(f"each question won by its answer's segment view: {mean([perplexity(seg[p]) for p in passages]):.2f}")
    share = Counter()
    for p in passages:
        share.update(sent[p])
    total = sum(share.values())
    print("answer sentence index (last = k-1 and later): "
          + " ".join(f"{i}:{100 * share[i] / total:.1f}%" for i in range(k)))


if __name__ == "__main__":
    main()
