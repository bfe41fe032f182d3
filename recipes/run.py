#!/usr/bin/env python
"""Run a recipe: data preparation → (pseudo-queries, warm-up) → train → encode in shards → index → search → evaluate.

    python recipes/run.py squad mvr --data_dir /data/dpr --output_dir runs/squad-mvr     # full scale (GPUs)
    python recipes/run.py squad mvr --smoke                                              # tiny slice, tiny model
    python recipes/run.py --all --smoke                                                  # every recipe (CI)
    python recipes/run.py beir dpr --checkpoint runs/msmarco-dpr --beir_dir beir/scifact beir/nfcorpus
    python recipes/run.py msmarco dce --dry_run          # print the exact driver commands, run nothing
    python recipes/run.py nq mvr --dry_run --cores 32 --gpus 8 --ram_budget_gb 64   # the plan for that machine

A recipe is ``recipes/<benchmark>/<method>.json``: the paper's settings for each stage, given as the
drivers' own flags. Every stage runs the package's drivers in this process and prints the equivalent
``python -m multiview_plugin...`` command first, so a log is a script. Outputs go to ``--output_dir``
(data/, models/, emb/, index/, runs/, results.json); a finished stage is not redone when its output exists
(training resumes from its last checkpoint, encoding from its last flushed batch).

``--smoke`` keeps every stage and swaps in a tiny random BERT (and a tiny T5 doc2query model), a tiny slice
of data in the benchmark's official file formats, 2 training steps and 2 encode shards.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from multiview_plugin.atomic import atomic_open, write_jsonl, write_lines

RECIPES = Path(__file__).resolve().parent
if str(RECIPES) not in sys.path:
    sys.path.insert(0, str(RECIPES))  # its sibling modules (sources.py, plan.py), also when loaded by file path

from sources import (  # noqa: E402  (where each recipe's data comes from; recipes/plan.py reads them too)
    ANSERINI_DPR_TOPICS,
    BEIR_URL,
    DPR_FILES,
    EVAL_SOURCES,
    SHARED,
    TEVATRON_CORPUS,
    TEVATRON_HUB,
    beir_names,
    locate_eval_file,
)

BENCHMARKS = ("squad", "nq", "triviaqa", "msmarco", "beir")
logger = logging.getLogger("recipes")


# ----------------------------------------------------------------------------- helpers


def methods_of(benchmark: str) -> list[str]:
    return sorted(p.stem for p in (RECIPES / benchmark).glob("*.json"))


def load_recipe(benchmark: str, method: str) -> dict:
    path = RECIPES / benchmark / f"{method}.json"
    if not path.is_file():
        raise SystemExit(f"no recipe {path}; {benchmark} has: {', '.join(methods_of(benchmark))}")
    return json.loads(path.read_text(encoding="utf-8"))


def flags(options: dict[str, Any]) -> list[str]:
    """``{"a": 1, "b": True, "c": False, "d": [1, 2]}`` → ``--a 1 --b --d 1 2``."""
    out: list[str] = []
    for key, value in options.items():
        if value is None or value is False:
            continue
        out.append(f"--{key}")
        if value is True:
            continue
        out.extend(str(v) for v in value) if isinstance(value, list) else out.append(str(value))
    return out


class Runner:
    """Runs driver ``main(argv)`` functions in this process, printing each as a shell command; a step given
    ``procs`` > 1 is printed as ``torchrun --nproc_per_node <procs> -m <module> ...`` and run so, in a child
    process (``python -m torch.distributed.run``, the module behind the ``torchrun`` command)."""

    def __init__(self, dry_run: bool = False):
        self.dry_run = dry_run
        self.commands: list[str] = []

    def __call__(self, module: str, argv: list[str], procs: int = 1) -> None:
        quoted = " ".join(shlex.quote(a) for a in argv)
        command = (f"torchrun --nproc_per_node {procs} -m {module} {quoted}" if procs > 1
                   else f"python -m {module} {quoted}")
        self.commands.append(command)
        print(f"$ {command}", flush=True)
        if self.dry_run:
            return
        if procs > 1:
            import subprocess

            rc = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(procs),
                                 "-m", module, *argv], check=False).returncode
        else:
            rc = importlib.import_module(module).main(argv)
        if rc not in (0, None):
            raise SystemExit(f"step failed (exit {rc}): {command}")


# ----------------------------------------------------------------------------- data


def smoke_source():
    """The embedded quickstart data: the tiny slice every smoke run writes in its benchmark's formats."""
    from multiview_plugin.quickstart.dataset import build_quickstart_data

    return build_quickstart_data(num_entities=18, seed=3)


def smoke_dpr_files(folder: Path, benchmark: str) -> None:
    """DPR's release formats: biencoder json, psgs_w100.tsv (id, text, title), qa.csv (question, [answers])."""
    data = smoke_source()
    train_name, qa_name = DPR_FILES[benchmark]

    def ctx(p: dict) -> dict:
        return {"title": p["title"], "text": p["text"], "passage_id": p["docid"]}

    records = [{"question": r["query"], "answers": r["answers"],
                "positive_ctxs": [ctx(p) for p in r["positive_passages"]], "negative_ctxs": [],
                "hard_negative_ctxs": [ctx(p) for p in r["negative_passages"]]} for r in data.train]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / train_name).write_text(json.dumps(records), encoding="utf-8")
    write_lines(folder / "psgs_w100.tsv", ["id\ttext\ttitle"] + [f"{p['docid']}\t{p['text']}\t{p['title']}"
                                                                  for p in data.corpus.values()])
    write_lines(folder / qa_name, [f"{data.eval_queries[q]}\t{json.dumps(a)}" for q, a in data.eval_answers.items()])


def smoke_msmarco_files(folder: Path) -> None:
    """MS MARCO's formats: collection.tsv, queries.*.tsv, TREC qrels (dev subset and DL-style graded)."""
    data = smoke_source()
    folder.mkdir(parents=True, exist_ok=True)
    write_lines(folder / "collection.tsv", [f"{d}\t{p['title']} {p['text']}" for d, p in data.corpus.items()])
    write_lines(folder / "queries.train.tsv", [f"{r['query_id']}\t{r['query']}" for r in data.train])
    write_lines(folder / "qrels.train.tsv", [f"{r['query_id']} 0 {r['positive_passages'][0]['docid']} 1"
                                              for r in data.train])
    write_lines(folder / "topics.msmarco-passage.dev-subset.txt", [f"{q}\t{t}" for q, t in data.eval_queries.items()])
    write_lines(folder / "qrels.msmarco-passage.dev-subset.txt", [f"{q} 0 {d} 1" for q, j in data.eval_qrels.items()
                                                                   for d in j])


def smoke_beir_dir(folder: Path) -> Path:
    """A BEIR folder (corpus.jsonl, queries.jsonl, qrels/{train,test}.tsv with a header)."""
    data = smoke_source()
    (folder / "qrels").mkdir(parents=True, exist_ok=True)
    write_jsonl(folder / "corpus.jsonl", [{"_id": d, "title": p["title"], "text": p["text"]}
                                           for d, p in data.corpus.items()])
    queries = {r["query_id"]: r["query"] for r in data.train} | data.eval_queries
    write_jsonl(folder / "queries.jsonl", [{"_id": q, "text": t} for q, t in queries.items()])
    write_lines(folder / "qrels" / "train.tsv", ["query-id\tcorpus-id\tscore"] + [
        f"{r['query_id']}\t{r['positive_passages'][0]['docid']}\t1" for r in data.train])
    write_lines(folder / "qrels" / "test.tsv", ["query-id\tcorpus-id\tscore"] + [
        f"{q}\t{d}\t1" for q, j in data.eval_qrels.items() for d in j])
    return folder


def export_hub_corpus(name: str, path: Path, dry_run: bool = False) -> Path:
    """A hub corpus (``docid``/``_id``, ``title``, ``text``) written once as a local jsonl for the encode driver;
    a dry run only says what it would download and export."""
    if path.is_file():
        return path
    if dry_run:
        print(f"# would download the hub dataset {name} and export it to {path} (dry run: nothing fetched)",
              flush=True)
        return path
    import datasets

    rows = datasets.load_dataset(name, split="train")
    id_key = "docid" if "docid" in rows.column_names else "_id"
    text_key = "text" if "text" in rows.column_names else "document_text"
    has_title = "title" in rows.column_names
    print(f"exporting {name} ({len(rows)} documents) to {path}", flush=True)
    write_jsonl(path, ({"docid": str(r[id_key]), "title": r["title"] if has_title else "", "text": r[text_key]}
                        for r in rows))
    return path


def download_beir(name: str, folder: Path, dry_run: bool = False) -> Path:
    """BEIR's official zip for dataset ``name``, unpacked into ``folder/name`` (once); a dry run only says so."""
    target = folder / name
    if (target / "corpus.jsonl").is_file():
        return target
    if dry_run:
        print(f"# would download {BEIR_URL.format(name)} into {target} (dry run: nothing fetched)", flush=True)
        return target
    import tempfile
    import urllib.request
    import zipfile

    folder.mkdir(parents=True, exist_ok=True)
    url = BEIR_URL.format(name)
    print(f"downloading {url}", flush=True)
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        archive = Path(tmp) / f"{name}.zip"
        urllib.request.urlretrieve(url, archive)
        with zipfile.ZipFile(archive) as z:
            z.extractall(tmp)
        os.replace(Path(tmp) / name, target)  # complete folders only
    return target


def pyserini_answers(value) -> list[str]:
    """A DPR topic's answers as Pyserini's ``get_topics`` gives them: Anserini's topic reader keeps the qa.csv
    field as a string, a Python list literal, sometimes CSV-quoted (``"[""a"", ""b""]"``; Pyserini's own
    ``convert_trec_run_to_dpr_retrieval_run`` unquotes and evaluates it the same way); a list is kept."""
    import ast

    if isinstance(value, str):
        if value.startswith('"'):
            value = value[1:-1].replace('""', '"')
        value = ast.literal_eval(value)
    return [str(a) for a in value]


def export_eval_file(name: str, source: str, target: Path) -> Path:
    """Write Anserini's file ``name`` to ``target`` from Pyserini or ir_datasets (``source`` as
    :func:`locate_eval_file` named it), once."""
    if target.is_file():
        return target
    kind, pyserini_name, irds_name = EVAL_SOURCES[name]
    if source.startswith("Pyserini"):
        from pyserini.search import get_qrels_file, get_topics

        if kind == "qrels":
            lines = Path(get_qrels_file(pyserini_name)).read_text(encoding="utf-8").splitlines()
        else:
            topics = get_topics(pyserini_name)
            ordered = sorted(topics.items(), key=lambda kv: (str(type(kv[0])), kv[0]))
            lines = [f"{t['title']}\t{pyserini_answers(t.get('answers', []))!r}" if kind == "dpr"
                     else f"{q}\t{t['title']}" for q, t in ordered]
    elif source.startswith("ir_datasets"):
        import ir_datasets

        ds = ir_datasets.load(irds_name)
        if kind == "qrels":
            lines = [f"{r.query_id} 0 {r.doc_id} {r.relevance}" for r in ds.qrels_iter()]
        else:
            lines = [f"{q.text}\t{list(q.answers)!r}" if kind == "dpr" else f"{q.query_id}\t{q.text}"
                     for q in ds.queries_iter()]
    else:
        raise SystemExit(f"error: {name}: {source}")
    print(f"writing {target} from {source}", flush=True)
    target.parent.mkdir(parents=True, exist_ok=True)
    write_lines(target, lines)
    return target


def eval_file(name: str, args: argparse.Namespace, data: Path, dry_run: bool) -> Path:
    path, source = locate_eval_file(name, args)
    if path is not None:
        return path
    target = data / "eval" / name
    if dry_run:
        print(f"# would write {target} from {source} (dry run: nothing fetched)" if not source.startswith("not found")
              else f"# {name}: {source}", flush=True)
        return target
    if source.startswith("not found"):
        raise SystemExit(f"error: {name}: {source}")
    return export_eval_file(name, source, target)


def prepare_dpr(benchmark: str, args: argparse.Namespace, data: Path, run: Runner) -> dict:
    """NQ / TriviaQA / SQuAD with DPR's data: train file, Wikipedia passages, test questions with answers."""
    train_name, qa_name = DPR_FILES[benchmark]
    src = Path(args.data_dir) if args.data_dir else None
    if args.smoke:
        src = data / "raw"
        smoke_dpr_files(src, benchmark)
    if src is None:  # Tevatron's hub copies (needs network), evaluated on Anserini's copy of DPR's test questions
        topics = eval_file(ANSERINI_DPR_TOPICS[benchmark], args, data, run.dry_run)
        corpus = export_hub_corpus(TEVATRON_CORPUS[benchmark], data / "corpus.jsonl", run.dry_run)
        return {"train_hub": TEVATRON_HUB[benchmark], "corpus": corpus,
                "evals": [{"name": f"{benchmark}-test", "topics": topics, "answers": topics, "topk": [5, 20, 100]}]}
    train = data / "train.jsonl"
    if not train.is_file():
        run("multiview_plugin.data.dpr", [str(src / train_name), str(train), "--negatives", "hard"])
    qa = src / qa_name
    return {"train": train, "corpus": src / "psgs_w100.tsv",
            "evals": [{"name": f"{benchmark}-test", "topics": qa, "answers": qa, "topk": [5, 20, 100]}]}


def prepare_msmarco(args: argparse.Namespace, data: Path, run: Runner) -> dict:
    src = Path(args.data_dir) if args.data_dir else None
    if args.smoke:
        src = data / "raw"
        smoke_msmarco_files(src)
    hub = src is None  # Tevatron's hub copies (needs network)
    train = data / "train.jsonl"
    if not hub and not train.is_file():
        run("multiview_plugin.data.msmarco", ["--collection", str(src / "collection.tsv"), "--queries",
                                              str(src / "queries.train.tsv"), "--qrels", str(src / "qrels.train.tsv"),
                                              "--output", str(train), "--num_negatives", "2" if args.smoke else "30"])
    def ev(name: str) -> Path:
        return src / name if args.smoke else eval_file(name, args, data, run.dry_run)

    evals = [{"name": "msmarco-dev", "topics": ev("topics.msmarco-passage.dev-subset.txt"),
              "qrels": ev("qrels.msmarco-passage.dev-subset.txt"), "metrics": ["MRR@10", "R@1000"]}]
    if not args.smoke:
        for name, t, q in (("dl19", "topics.dl19-passage.txt", "qrels.dl19-passage.txt"),
                           ("dl20", "topics.dl20.txt", "qrels.dl20-passage.txt")):
            evals.append({"name": name, "topics": ev(t), "qrels": ev(q), "metrics": ["nDCG@10", "R@1000"],
                          "rel_level": 2})
    if hub:
        return {"train_hub": "Tevatron/msmarco-passage", "evals": evals,
                "corpus": export_hub_corpus(TEVATRON_CORPUS["msmarco"], data / "corpus.jsonl", run.dry_run)}
    return {"train": train, "corpus": src / "collection.tsv", "evals": evals}


def prepare_beir(args: argparse.Namespace, data: Path, run: Runner, recipe: dict | None = None) -> dict:
    """Train on a BEIR folder's train judgments (minus a carved dev set) unless --checkpoint is given; evaluate
    on every --beir_dir (test judgments; the train folder's carved dev set when it has no test file). Without the
    flags, the recipe's ``train_beir`` and ``beir_datasets`` (not for --smoke, which has its own slice)."""
    train_name, eval_names = beir_names(recipe or {}, args) if not args.smoke else (args.train_beir_dir,
                                                                                    args.beir_dir or [])

    def fetch(d: str) -> Path:  # a name that is not a folder (e.g. "scifact") is fetched from BEIR's server
        return Path(d) if Path(d).is_dir() else download_beir(d, data / "beir", run.dry_run)

    dirs = [fetch(d) for d in eval_names]
    train_dir = fetch(train_name) if train_name else None
    if args.smoke:
        train_dir = smoke_beir_dir(data / "raw" / "smoke")
        dirs = dirs or [train_dir]
    if not dirs:
        raise SystemExit("beir: pass --beir_dir (one or more BEIR folders)")
    out: dict = {"evals": []}
    if not args.checkpoint:
        if train_dir is None:
            raise SystemExit("beir: pass --checkpoint (a trained model) or --train_beir_dir (a BEIR folder with "
                             "qrels/train.tsv, e.g. scifact) to train one")
        carved = data / "train"
        if not (carved / "train.jsonl").is_file():
            run("multiview_plugin.data.beir", ["--beir_dir", str(train_dir), "--output_dir", str(carved),
                                               "--dev_size", "5" if args.smoke else "200"])
        out["train"] = carved / "train.jsonl"
        out["train_corpus"] = carved / "corpus.jsonl"
        out["evals"].append({"name": f"{train_dir.name}-dev", "topics": carved / "eval_queries.jsonl",
                             "qrels": carved / "eval_qrels.tsv", "corpus": carved / "corpus.jsonl",
                             "metrics": ["nDCG@10", "R@100"]})
    for d in dirs:
        test = next((p for p in (d / "qrels" / "test.tsv", d / "qrels" / "test.tsv.gz") if p.is_file()), None)
        if test is None and run.dry_run and not d.exists():
            test = d / "qrels" / "test.tsv"  # to be downloaded: BEIR's zips hold their test judgments there
        if test is None:
            logger.warning("%s has no qrels/test.tsv: skipped", d)
            continue
        out["evals"].append({"name": d.name, "topics": d / "queries.jsonl", "qrels": test,
                             "corpus": d / "corpus.jsonl", "metrics": ["nDCG@10", "R@100"], "beir": True})
    return out


# ----------------------------------------------------------------------------- pipeline


def smoke_options(stage: str, options: dict, work: Path) -> dict:
    if str(RECIPES.parent) not in sys.path:
        sys.path.insert(0, str(RECIPES.parent))  # the repository root: tools/ (not installed with the package)
    from tools.testing import make_tiny_bert, make_tiny_t5

    options = dict(options)
    if stage == "train":
        tiny = work / "tiny-bert"
        if not (tiny / "config.json").is_file():
            make_tiny_bert(tiny)
        options.update(model_name_or_path=str(tiny), max_steps=2, per_device_train_batch_size=4,
                       passage_max_len=48, query_max_len=16, fp16=False, bf16=False, save_strategy="no",
                       dataloader_num_workers=0, use_cpu=True, logging_steps=1, num_train_epochs=None,
                       gradient_accumulation_steps=1)
        if "mlr_layers" in options:
            options["mlr_layers"] = "2,1"
    elif stage == "generate":
        tiny = work / "tiny-doc2query"
        if not (tiny / "config.json").is_file():
            make_tiny_t5(tiny, seq2seq=True)
        options.update(model_name_or_path=str(tiny), num_queries=2, max_query_length=6, batch_size=8, fp16=False)
    elif stage == "encode":
        options.update(per_device_eval_batch_size=8, fp16=False)
    return options


def multi_gpu(options: dict, args: argparse.Namespace) -> dict:
    """Training options for ``--gpus`` processes under torchrun: the recipe's batch stays the global batch (each
    process takes 1/gpus of it, in-batch negatives gathered across processes: ``--negatives_x_device``); a batch
    that does not split evenly is refused. One GPU: the options as they are."""
    if args.gpus <= 1:
        return options
    batch = int(options.get("per_device_train_batch_size", 8))
    if batch % args.gpus:
        raise SystemExit(f"error: --gpus {args.gpus}: the recipe's batch of {batch} does not split evenly over "
                         f"{args.gpus} processes; use a --gpus that divides {batch}")
    out = {**options, "per_device_train_batch_size": batch // args.gpus, "negatives_x_device": True}
    if args.smoke:
        out["ddp_backend"] = "gloo"  # --smoke trains on the CPU
    return out


def node_shards(shards: int, nodes: int) -> list[list[int]]:
    """The encoded shards of each node: ``shards`` raised to a multiple of ``nodes`` so every node holds as many
    (its 1/nodes of the vectors, as the plan prices it), consecutive shard numbers per node."""
    per_node = -(-shards // nodes)
    return [list(range(k * per_node, (k + 1) * per_node)) for k in range(nodes)]


def run_recipe(benchmark: str, method: str, args: argparse.Namespace) -> dict:
    recipe = load_recipe(benchmark, method)
    out = Path(args.output_dir or f"runs/recipes/{benchmark}-{method}{'-smoke' if args.smoke else ''}")
    data, models, emb, runs = out / "data", out / "models", out / "emb", out / "runs"
    run = Runner(args.dry_run)
    start = time.perf_counter()
    print(f"== {benchmark} / {method}: {recipe.get('paper', '')}", flush=True)
    plans = check_plan(benchmark, method, recipe, args)
    if benchmark in DPR_FILES:
        prepared = prepare_dpr(benchmark, args, data, run)
    elif benchmark == "msmarco":
        prepared = prepare_msmarco(args, data, run)
    else:
        prepared = prepare_beir(args, data, run, recipe)

    def opts(stage: str) -> dict:
        options = dict(recipe.get(stage, {}))
        return smoke_options(stage, options, out) if args.smoke else options

    model_dir = Path(args.checkpoint) if args.checkpoint else models / method
    main_corpus = prepared.get("corpus") or prepared.get("train_corpus")
    pseudo_files: dict[str, Path] = {}

    def pseudo_for(corpus: str | Path) -> Path | None:
        """dce: the corpus's pseudo-query file (--pseudo_queries, or generated once per corpus)."""
        corpus = str(corpus)
        if "generate" not in recipe:
            return None
        if corpus not in pseudo_files:
            if args.pseudo_queries and (args.checkpoint or corpus == str(main_corpus)):
                pseudo_files[corpus] = Path(args.pseudo_queries)
            else:
                path = (data / "pseudo_queries.jsonl" if corpus == str(main_corpus) else
                        data / "pseudo" / f"{Path(corpus).parent.name}.jsonl")
                if not path.is_file():
                    gen = {**opts("generate"), "corpus_path": corpus, "output": str(path)}
                    run("multiview_plugin.driver.generate_queries", flags(gen))
                pseudo_files[corpus] = path
        return pseudo_files[corpus]

    if not args.checkpoint:
        train_opts = opts("train")
        if "generate" in recipe:  # dce: pseudo-queries, then warm-up on them
            pseudo = pseudo_for(main_corpus)
            warm = {**train_opts, **recipe.get("warmup", {}), "pseudo_queries_path": str(pseudo),
                    "corpus_path": str(main_corpus), "output_dir": str(models / f"{method}-warmup")}
            if args.smoke:
                warm.update(max_steps=2, num_train_epochs=None)
            run("multiview_plugin.driver.train", flags(multi_gpu(warm, args)), procs=args.gpus)
            train_opts["model_name_or_path"] = str(models / f"{method}-warmup")
        if "train_hub" in prepared:
            train_opts.update(dataset_name=prepared["train_hub"], output_dir=str(model_dir))
        else:
            train_opts.update(dataset_path=str(prepared["train"]), output_dir=str(model_dir))
        run("multiview_plugin.driver.train", flags(multi_gpu(train_opts, args)), procs=args.gpus)

    shards = 2 if args.smoke else recipe.get("shards", 1)
    corpora = {str(prepared["corpus"])} if "corpus" in prepared else set()
    corpora |= {str(e["corpus"]) for e in prepared["evals"] if "corpus" in e}
    results: dict[str, dict] = {}
    for corpus in sorted(corpora):
        key = Path(corpus).parent.name if len(corpora) > 1 else "corpus"
        plan = (plans or {}).get(Path(corpus).parent.name) or (plans or {}).get("corpus")
        # --smoke: one node unless --nodes asks for more (its slice split over them, searched in this process)
        nodes = (args.nodes or 1) if args.smoke else plan["nodes"] if plan is not None else 1
        groups = node_shards(shards, nodes)
        folders = [emb / key] if nodes == 1 else [emb / key / f"node{k}" for k in range(nodes)]
        encode_corpus(run, args, {**opts("encode"), "model_name_or_path": str(model_dir), "dataset_path": corpus},
                      pseudo_for(corpus), folders, groups)
        indexes = [out / "index" / key] if nodes == 1 else [out / "index" / key / f"node{k}" for k in range(nodes)]
        for folder, index in zip(folders, indexes):
            if (index / "multiview.json").is_file():
                continue
            index_flags = ["--passage_reps", str(folder / "corpus.*.pkl"), "--index_dir", str(index)]
            if nodes > 1:  # each node's index holds its share of the encoded shards (checked at search time)
                index_flags.append("--allow_partial")
            if plan is not None and not args.smoke and plan["index_factory"] != "Flat":
                index_flags += ["--index_factory", plan["index_factory"]]
                if plan["doc_index_factory"]:
                    index_flags += ["--doc_index_factory", plan["doc_index_factory"]]
                if plan["train_size"]:  # enough vectors per IVF list (recipes/plan.py MIN_TRAIN_PER_LIST)
                    index_flags += ["--train_size", str(plan["train_size"])]
                if plan.get("ivf_training"):  # two-level k-means (bench/ivf_build.log)
                    index_flags += ["--ivf_training", plan["ivf_training"]]
                if plan.get("rescore_store"):  # lossy codes: re-score candidates from views on disk
                    index_flags += ["--rescore_store", plan["rescore_store"]]
            run("multiview_plugin.driver.index", index_flags)
        # several nodes: one sharded search over every node's index, each served by a Ray actor on its node
        searched = ["--index", ",".join(map(str, indexes))]
        if nodes > 1 and (args.ray_address or not args.smoke):
            searched += ["--ray_address", args.ray_address or "auto"]
        from multiview_plugin.index.meta import DEFAULT_AGGREGATION  # noqa: PLC0415

        if nodes > 1 and DEFAULT_AGGREGATION.get(method, "max") != "max":
            print(f"# {method} on {nodes} nodes: its {DEFAULT_AGGREGATION[method]} aggregation does not decompose "
                  "over shard indexes; the sharded search ranks by max over views", flush=True)
            searched += ["--aggregation", "max"]
        for ev in prepared["evals"]:
            if str(ev.get("corpus", prepared.get("corpus"))) != corpus:
                continue
            run_file = runs / f"{ev['name']}.trec"
            hits = 10 if args.smoke else recipe.get("search", {}).get("hits", 1000)
            run("multiview_plugin.driver.search", [*searched, "--topics", str(ev["topics"]),
                                                   "--encoder", str(model_dir), "--output", str(run_file),
                                                   "--hits", str(hits)])
            metrics = runs / f"{ev['name']}.metrics.json"
            argv = ["--run", str(run_file), "--output_json", str(metrics)]
            if "answers" in ev:
                argv += ["--answers", str(ev["answers"]), "--corpus", corpus, "--topk", *map(str, ev["topk"])]
            if "qrels" in ev:
                argv += ["--qrels", str(ev["qrels"]), "--metrics", *ev["metrics"],
                         "--rel_level", str(ev.get("rel_level", 1))]
            run("multiview_plugin.driver.evaluate", argv)
            if not args.dry_run:
                results[ev["name"]] = json.loads(metrics.read_text(encoding="utf-8"))
    beir = [results[e["name"]]["nDCG@10"] for e in prepared["evals"] if e.get("beir") and e["name"] in results]
    summary = {"benchmark": benchmark, "method": method, "smoke": args.smoke, "model": str(model_dir),
               "results": results, "wall_s": round(time.perf_counter() - start, 1), "commands": run.commands,
               "paper_target": recipe.get("target")}
    if beir:
        summary["beir_average_nDCG@10"] = sum(beir) / len(beir)
    if not args.dry_run:
        with atomic_open(out / "results.json") as f:
            f.write(json.dumps(summary, indent=2) + "\n")
        for name, values in results.items():
            print(f"{benchmark}/{method} {name}: " + ", ".join(f"{k} {v:.4g}" for k, v in values.items()), flush=True)
        if beir:
            print(f"{benchmark}/{method} BEIR average nDCG@10: {summary['beir_average_nDCG@10']:.4f}")
    return summary


def encode_corpus(run: Runner, args: argparse.Namespace, options: dict, pseudo: Path | None, folders: list[Path],
                  groups: list[list[int]]) -> None:
    """Encode a corpus into ``sum(len(g) for g in groups)`` shards, node k's shards ``groups[k]`` into
    ``folders[k]``. One node with several GPUs: one torchrun command, a process per GPU taking shards r, r+W, ...
    (``encoding/parallel.py``); otherwise one command per shard (on several nodes, each node runs its own)."""
    total = sum(len(g) for g in groups)
    if pseudo is not None:
        options = {**options, "pseudo_queries": str(pseudo)}
    if len(groups) == 1 and args.gpus > 1:
        run("multiview_plugin.driver.encode", flags({**options, "encode_output_path": str(folders[0] / "corpus.pkl"),
                                                     "dataset_number_of_shards": total}), procs=args.gpus)
        return
    for folder, group in zip(folders, groups):
        for i in group:
            shard = {"encode_output_path": str(folder / f"corpus.{i}.pkl"), "dataset_number_of_shards": total,
                     "dataset_shard_index": i}
            run("multiview_plugin.driver.encode", flags({**options, **shard}))


def check_plan(benchmark: str, method: str, recipe: dict, args: argparse.Namespace) -> dict[str, dict | None]:
    """Print the full-scale plan (recipes/plan.py): the index line per corpus, then every stage for the machine
    the flags state; refuse, before any stage runs, a budget no index fits (naming what would) or a plan needing
    more RAM than this machine has (unless --force_plan). --smoke runs keep their Flat index on a tiny slice."""
    sys.path.insert(0, str(RECIPES))
    from plan import PlanRefused, corpus_docs, machine_ram_gb, make_plan, pipeline_stages, plan_line

    if args.smoke:
        plans = ({"corpus": make_plan(benchmark, method, recipe, args.ram_budget_gb, max_ms=args.max_ms_per_query)}
                 if benchmark != "beir" else {})
        print(plan_line(plans.get("corpus")) + " [--smoke builds Flat on its slice]", flush=True)
        return plans
    train_name, eval_names = beir_names(recipe, args) if benchmark == "beir" else (None, [])
    docs = corpus_docs(benchmark, recipe, eval_names) if benchmark == "beir" else {"corpus": None}
    if docs is None:
        print(plan_line(None), flush=True)
        return {}
    try:
        plans = {name: make_plan(benchmark, method, recipe, args.ram_budget_gb, nodes=args.nodes, cores=args.cores,
                                 n_docs=n, max_ms=args.max_ms_per_query) for name, n in docs.items()}
    except PlanRefused as refused:
        raise SystemExit(f"error: {refused}") from None
    for name, plan in plans.items():
        print(("" if len(plans) == 1 else f"[{name}] ") + plan_line(plan), flush=True)
    for line in pipeline_stages(benchmark, method, recipe, args, plans):
        print(f"  {line}", flush=True)
    if args.dry_run:
        return plans
    ram = machine_ram_gb()
    need = max((p["ram_gb"] for p in plans.values() if p), default=0.0)
    if need > ram and not args.force_plan:
        raise SystemExit(f"plan needs {need:.0f} GB of RAM for its index, this machine has {ram:.0f} GB: run it on a "
                         "larger machine, lower --ram_budget_gb to choose a smaller index (or add --nodes), or pass "
                         "--force_plan")
    return plans


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python recipes/run.py", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("benchmark", nargs="?", choices=BENCHMARKS, help="Which benchmark's recipe.")
    p.add_argument("method", nargs="?", help="Which method (a recipes/<benchmark>/<method>.json).")
    p.add_argument("--all", action="store_true", help="Every recipe of every benchmark (with --smoke: what CI runs).")
    p.add_argument("--smoke", action="store_true", help="Tiny data slice and tiny models, same stages.")
    p.add_argument("--dry_run", action="store_true", help="Print the commands, run nothing.")
    p.add_argument("--output_dir", help="Where everything goes (default runs/recipes/<benchmark>-<method>).")
    p.add_argument("--data_dir", help="Local raw data: DPR's release files (nq, triviaqa, squad) or MS MARCO's "
                   "collection.tsv / queries.train.tsv / qrels.train.tsv. Without it, Tevatron's hub datasets "
                   "(Tevatron/wikipedia-nq, ..., Tevatron/msmarco-passage and their -corpus) are used: needs network.")
    p.add_argument("--topics_dir", help=f"Anserini topics/qrels folder for MS MARCO dev and TREC DL (default "
                   f"{SHARED / 'anserini'}).")
    p.add_argument("--beir_dir", nargs="+", help="beir: BEIR folders to evaluate on (nDCG@10 each, and the average); "
                   "a bare dataset name (e.g. scifact) is downloaded from BEIR's server first (needs network).")
    p.add_argument("--train_beir_dir", help="beir: a BEIR folder with qrels/train.tsv to train on (e.g. scifact).")
    p.add_argument("--checkpoint", help="Skip training: evaluate this saved model.")
    p.add_argument("--pseudo_queries", help="dce with --checkpoint: the corpus's pseudo-query file.")
    p.add_argument("--ram_budget_gb", type=float, default=256.0, help="RAM per node: full-scale plans choose the "
                   "index (exact Flat if it fits, else the fastest measured to keep >= 0.98 of exact recall: SQ8 or "
                   "PQ codes with an fp16 re-scoring store on disk, HNSW, a document index) that fits it, or refuse "
                   "naming what would fit (more --nodes, or the smallest index's RAM). Default 256.")
    p.add_argument("--max_ms_per_query", type=float, help="Search latency budget per query (one thread, as the plan "
                   "projects it): exact Flat is chosen only within it, else the fastest index that fits "
                   "--ram_budget_gb; without --nodes, more nodes where none of the fewest that fit meets it "
                   "(default: none, exact Flat whenever it fits).")
    p.add_argument("--cores", type=int, default=1, help="CPU cores per node the plan counts (CPU stages: the "
                   "measured one-thread rate x cores; the index build: the speed-up bench/build_scaling_768.log "
                   "measured, never past its largest thread count; default 1).")
    p.add_argument("--gpus", type=int, default=1, help="GPUs per node: training and encoding run under torchrun "
                   "--nproc_per_node GPUS (0: CPU only; default 1). The plan prices a GPU stage only from a rate "
                   "measured on a GPU (bench/throughput.json), else prints it as not measured with its FLOPs.")
    p.add_argument("--gpu_name", default="H100", help="The GPU the plan is for (default H100); printed beside GPU "
                   "stages, which bench/throughput.json has not measured on any GPU.")
    p.add_argument("--nodes", type=int, help="Machines the corpus is split over (one shard index per node, built "
                   "and searched at once: RAM, disk and build per node are 1/nodes). Default: the fewest on which an "
                   "index fits --ram_budget_gb (1 when it fits one).")
    p.add_argument("--ray_address", help="With a plan over several nodes: the Ray cluster the sharded search "
                   "runs on (one actor per node's index; default auto, this machine's cluster). The runner builds the "
                   "nodes' indexes here one after another; on a cluster, run each node's printed index command on "
                   "that node.")
    p.add_argument("--force_plan", action="store_true", help="Run even when the plan needs more RAM than this "
                   "machine has (default: refuse before training or encoding).")
    return p


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    for flag in ("cores", "nodes"):
        if getattr(args, flag) is not None and getattr(args, flag) < 1:
            parser.error(f"--{flag} must be >= 1")
    sys.path.insert(0, str(RECIPES))
    from plan import MAX_CORES, MAX_GPUS, MAX_NODES

    for flag, most in (("nodes", MAX_NODES), ("cores", MAX_CORES), ("gpus", MAX_GPUS)):
        if (getattr(args, flag) or 0) > most:  # a plan divided over more would print zeros, not figures
            parser.error(f"--{flag} {getattr(args, flag)}: plans consider at most {most}")
    if args.gpus < 0 or args.ram_budget_gb <= 0 or (args.max_ms_per_query is not None and args.max_ms_per_query <= 0):
        parser.error("--gpus must be >= 0, --ram_budget_gb > 0 and --max_ms_per_query > 0")
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    if args.all:
        todo = [(b, m) for b in BENCHMARKS for m in methods_of(b)]
        base = Path(args.output_dir or "runs/recipes")
        for b, m in todo:
            run_recipe(b, m, argparse.Namespace(**{**vars(args), "output_dir": str(base / f"{b}-{m}")}))
        print(f"ran {len(todo)} recipes: " + ", ".join(f"{b}/{m}" for b, m in todo))
        return 0
    if not (args.benchmark and args.method):
        build_parser().error("give BENCHMARK METHOD, or --all")
    run_recipe(args.benchmark, args.method, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
