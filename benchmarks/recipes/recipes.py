"""Fine-tuning recipes measured against training CPU-minutes (issue 59): per corpus, each recipe's
test accuracy and macro-F1 beside the TF-IDF baseline's and a validation-weighted blend of the two.

    OMP_NUM_THREADS=2 .venv/bin/python benchmarks/recipes/recipes.py --corpora fortunes packages --plot docs/recipes.png
    .venv/bin/python benchmarks/recipes/recipes.py --corpora bbc --fraction 0.05 --recipes 1epoch \\
        --set train.max_steps=5 --set tokenize.max_length=64 --work /tmp/recipes   # a smoke run
    .venv/bin/python benchmarks/recipes/recipes.py --plot-only --plot docs/recipes.png       # redraw from --out

Per corpus (benchmarks/corpora.py; --fraction defaults to FRACTION's, each class's first
ceil(F n) documents), ingest, tokenize, split and baseline run once in --work/<corpus> on
params.yaml's defaults, BASE, then each --set (rerun only when those params change). Then per
recipe (RECIPES: a name and its key=value overrides, then each --set) in --work/<corpus>/<recipe>,
each in a fresh process: tokenize again where the recipe changes tokenize.*, features where its
train.head_init is probe (LP-FT; shared by the recipes that read the corpus's tokens), and train. The CPU seconds of a stage
are its process's user + system time (getrusage of the children, around each); training's
CPU-minutes are features' + train's. A recipe whose params params.yaml does not have is
skipped with a warning.
Scores, on the test split: the fine-tune (the model folder's Predictor), the baseline (its stage's
--predictions), and the blend p = w finetune + (1 - w) baseline, w in 0, 0.1, .. 1 chosen by
validation macro-F1 alone (the fine-tune's --val-predictions; the baseline refitted on the train
split by fit_baseline, which is deterministic, scoring validation). The baseline is the corpus's,
fitted once: a recipe's own train.class_weights does not refit it. `silent`: classes with
>= MIN_TEST test documents at F1 0 where the baseline's is above 0. One JSON line per (corpus,
recipe) is appended to --out (runs accumulate; the curve's cpu_seconds and validation scores
where train writes them), a Markdown table is logged, and --plot draws every line of --out
(benchmarks/recipes/recipes_plot.py). FRACTION aims at all of RECIPES in ~15 minutes a corpus on 2 cores:
an estimate from issue 59's pace, not yet measured (see its comment).
"""
from __future__ import annotations

import argparse
import ast
import datetime
import json
import logging
import os
import re
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # benchmarks/: corpora, timing
from timing import ROOT, stage, table, write_if_changed  # noqa: E402  (first: this checkout's textclf)
from corpora import CORPORA, source  # noqa: E402
from many_class import MIN_TEST, params, per_class_f1  # noqa: E402  (the same stages, as children)

log = logging.getLogger("recipes")
# ~15 minutes a corpus for every recipe, estimated (not measured): ~40 s of each train stage's
# start and end, the two budgets' 4 minutes, and ~8.5 passes over the train split at issue 59's
# 1.1 ms a token-document (0.75 s a step of 8 at ~85 tokens, 2 cores): bbc 336 documents (long:
# 128 tokens each), fortunes 1 147 (short); stdlib (1 254) and packages (1 820) sit at the floor
# of corpora.MIN_KEEP a class and will take longer (~20-25 minutes)
FRACTION = {"bbc": 0.15, "fortunes": 0.07, "stdlib": 0.05, "packages": 0.05}
BASE = ["tokenize.max_length=128"]  # issue 59's users ran 128; 256 (the default) doubles each step
# FT alone starts from a random head (head_init random); LP-FT from the probe (params.yaml's
# default); probe: the probe alone (a step at a vanishing learning rate, the encoder frozen)
# Fixed step counts (epochs), not budgets: on shared cores a budget's steps follow the load,
# while CPU seconds barely do. The curve's points are each epoch's validation (train's curve
# CSV, cpu_seconds), and for LP-FT the probe's (the features stage's CPU time, probe_val_*).
OLD_RATES = ["train.lr_encoder=1.0e-4", "train.lr_head=1.0e-3"]  # params.yaml's, written out: the figures keep them
RECIPES = {
    "ft-2epochs": ["train.epochs=2", "train.head_init=random", *OLD_RATES],  # fine-tuning alone, a random head
    "lpft-2epochs": ["train.epochs=2", "train.head_init=probe"],  # params.yaml's head and rates
    "probe": ["train.head_init=probe", "train.encoder=freeze", "train.max_steps=1", "train.lr_head=1.0e-12"],
    "ft-1epoch": ["train.epochs=1", "train.head_init=random", *OLD_RATES],  # what issue 59's user ran
    "lpft-1epoch": ["train.epochs=1", "train.head_init=probe", *OLD_RATES],
    "lpft-1epoch-cold": ["train.epochs=1", "train.lr_encoder=1.0e-4", "train.lr_head=1.0e-4"],
    "lpft-1epoch-lr3e-5": ["train.epochs=1", "train.lr_encoder=3.0e-5", "train.lr_head=3.0e-5"],  # LP-FT's small rate
    "budget5": ["train.epochs=0", "train.budget_minutes=5"],  # the default recipe on a 5-minute budget
}
DEFAULT_RECIPES = ["ft-2epochs", "lpft-2epochs", "probe"]
SHARED = ("ingest", "split", "baseline")  # sections a recipe may not change: its data is the corpus's
DATA = {"ingest": ("--corpus", "c.parquet", "--report", "r.json"),
        "tokenize": ("--corpus", "c.parquet", "--tokens", "t.parquet", "--stats", "s.json", "--histogram", "h.csv"),
        "split": ("--corpus", "c.parquet", "--splits", "sp.parquet", "--counts", "n.json"),
        "baseline": ("--corpus", "c.parquet", "--splits", "sp.parquet", "--out", "b.json",
                     "--predictions", "bp.parquet")}
FEATURES: dict = {}  # folder holding f.safetensors -> its features stage's (wall s, CPU s), this run's
GRID = np.round(np.linspace(0, 1, 11), 1)


def timed_stage(name: str, folder: Path, *args: str) -> tuple[float, float]:
    """many_class.stage in `folder` -> (wall seconds, CPU seconds: the child's user + system)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    wall, _ = stage(name, folder, *args)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime
    log.info("%s: %.1f CPU s", name, cpu)
    return wall, cpu


def unknown(overrides: list[str]) -> list[str]:
    """The keys of key=value overrides that params.yaml does not have (yet)."""
    defaults = yaml.safe_load((ROOT / "params.yaml").read_text())
    missing = []
    for item in overrides:
        key, node = item.split("=", 1)[0], defaults
        for part in key.split("."):
            if not isinstance(node, dict) or part not in node:
                missing.append(key)
                break
            node = node[part]
    return missing


def prepare(corpus: str, work: Path, fraction: float, sets: list[str]) -> dict:
    """The corpus's data stages in `work`, once for every recipe -> its params (rerun only when they change)."""
    work.mkdir(parents=True, exist_ok=True)
    src = source(corpus, work, fraction)
    staged = work / "staged.yaml"  # the params the data stages last ended on; params.yaml is rewritten below
    params(work, src, BASE + sets)
    p = yaml.safe_load((work / "params.yaml").read_text())
    if not staged.is_file() or yaml.safe_load(staged.read_text()) != p:
        staged.unlink(missing_ok=True)  # written again only once every data stage has ended
        for name, args in DATA.items():
            timed_stage(name, work, *args)
        baseline_validation(work, p)
        write_if_changed(staged, p)
    return p


def baseline_validation(work: Path, p: dict) -> None:
    """The baseline fitted on the train split as its stage fits it, scoring validation -> work/bvp.parquet."""
    from textclf.config import load_params
    from textclf.evaluate.baseline import fit_baseline, predict
    cfg = load_params(str(work / "params.yaml"))
    docs = split_docs(work)
    train, val = docs[docs["split"] == "train"], docs[docs["split"] == "validation"]
    model = fit_baseline(train["text"].tolist(), train["label"].to_numpy(), cfg.baseline, p["train"]["class_weights"])
    probs = predict(model, val["text"].tolist())
    frame = pd.DataFrame(probs, columns=[f"prob_{c}" for c in model.classes_])
    frame.insert(0, "doc_id", val["doc_id"].to_numpy())
    frame.to_parquet(work / "bvp.parquet")


def split_docs(work: Path) -> pd.DataFrame:
    """doc_id, text, label, split of the corpus, sorted by doc_id."""
    corpus = pd.read_parquet(work / "c.parquet", columns=["doc_id", "text", "label"])
    return corpus.merge(pd.read_parquet(work / "sp.parquet", columns=["doc_id", "split"]), on="doc_id") \
        .sort_values("doc_id").reset_index(drop=True)


def run_recipe(work: Path, name: str, overrides: list[str], shared: dict) -> dict:
    """Probe (LP-FT only) and train for one recipe in work/<name>, fresh -> CPU and wall seconds."""
    folder = work / name
    if folder.exists():
        shutil.rmtree(folder)
    folder.mkdir()
    params(folder, Path(shared["ingest"]["source"]), BASE + overrides)
    p = yaml.safe_load((folder / "params.yaml").read_text())
    changed = [s for s in SHARED if p[s] != shared[s]]
    if changed:
        raise SystemExit(f"recipe {name} changes {', '.join(changed)}: give those with --set, for every recipe")
    tokens, cost = "../t.parquet", {"probe cpu s": 0.0, "probe wall s": 0.0}
    if p["tokenize"] != shared["tokenize"]:
        tokens = "t.parquet"
        timed_stage("tokenize", folder, "--corpus", "../c.parquet", "--tokens", tokens, "--stats", "s.json",
                    "--histogram", "h.csv")
    probe_args: tuple[str, ...] = ()
    if p["train"].get("head_init") == "probe":
        # the features stage's output, shared by the recipes that read the corpus's tokens (as DVC
        # caches it per data version); its cost counts in each recipe that reads it
        shared_out = tokens != "t.parquet"  # recipes that change no model param share them
        out, owner = ("../f.safetensors", folder.parent) if shared_out else ("f.safetensors", folder)
        if owner not in FEATURES:
            FEATURES[owner] = timed_stage("features", folder, "--tokens", tokens, "--splits", "../sp.parquet",
                                          "--out", out)
        cost["probe wall s"], cost["probe cpu s"] = FEATURES[owner]
        probe_args = ("--features", out)
    cost["train wall s"], cost["train cpu s"] = timed_stage(
        "train", folder, "--tokens", tokens, "--splits", "../sp.parquet", "--model-dir", "model", "--curve",
        "curve.csv", "--guards", "guards.json", "--movement", "mv.csv", "--run-file", "run.json",
        "--checkpoint-dir", "ckpt", "--val-predictions", "vp.parquet", *probe_args)
    return cost


def probabilities(frame: pd.DataFrame, classes: list[str]) -> np.ndarray:
    """A frame's prob_<class> columns in `classes` order (a class it lacks: 0) -> (N, C)."""
    return frame.reindex(columns=[f"prob_{c}" for c in classes], fill_value=0.0).to_numpy(dtype=float)


def scores(truth: list[str], probs: np.ndarray, classes: list[str]) -> tuple[float, float, np.ndarray]:
    """-> (accuracy %, macro-F1 %, per-class F1) of the argmax of probs."""
    predicted = list(np.asarray(classes, dtype=object)[probs.argmax(axis=1)])
    f1 = per_class_f1(truth, predicted, classes)
    return 100 * float(np.mean(np.asarray(predicted) == np.asarray(truth))), 100 * float(np.mean(f1)), f1


def blend_weight(work: Path, folder: Path, classes: list[str]) -> tuple[float, float]:
    """w of the GRID whose blend scores the best validation macro-F1 (the first, on ties) -> (w, that F1 %)."""
    ft = pd.read_parquet(folder / "vp.parquet").set_index("doc_id").sort_index()
    base = pd.read_parquet(work / "bvp.parquet").set_index("doc_id").loc[ft.index]
    truth = ft["label"].tolist()
    p_ft, p_base = probabilities(ft, classes), probabilities(base, classes)
    f1 = [scores(truth, w * p_ft + (1 - w) * p_base, classes)[1] for w in GRID]
    best = int(np.argmax(f1))
    return float(GRID[best]), f1[best]


def score(work: Path, folder: Path) -> dict:
    """The fine-tune, the baseline and their blend on the test split -> a row's scores."""
    from textclf.inference.predictor import Predictor
    docs = split_docs(work)
    classes = sorted(set(docs.loc[docs["split"] == "train", "label"]))
    test = docs[docs["split"] == "test"]
    truth = test["label"].tolist()
    p_base = probabilities(pd.read_parquet(work / "bp.parquet").set_index("doc_id").loc[test["doc_id"]], classes)
    predictor = Predictor(folder / "model")
    raw = pd.DataFrame(predictor.predict_proba(test["text"].tolist()), columns=[f"prob_{c}" for c in predictor.labels])
    p_ft = probabilities(raw, classes)
    w, val_f1 = blend_weight(work, folder, classes)
    row = {"classes": len(classes), "test docs": len(test)}
    support = test["label"].value_counts().reindex(classes, fill_value=0).to_numpy()
    acc_b, f1_b, per_b = scores(truth, p_base, classes)
    for name, probs in (("fine-tune", p_ft), ("blend", w * p_ft + (1 - w) * p_base)):
        acc, f1, per = scores(truth, probs, classes)
        silent = [c for c, m, b, n in zip(classes, per, per_b, support) if n >= MIN_TEST and m == 0 and b > 0]
        row |= {f"{name} acc": acc, f"{name} macro-F1": f1, f"{name} silent": len(silent)}
    return row | {"baseline acc": acc_b, "baseline macro-F1": f1_b, "blend w": w, "blend val macro-F1": val_f1}


def curve(folder: Path, probe_cpu: float) -> list[dict]:
    """The training's validations against CPU seconds (the features stage's included): each
    epoch's row as train logs it ("epoch N: {...}", with cpu_seconds, the process's CPU so far),
    and for LP-FT the probe's scores before the first step, at the features stage's CPU time
    (train's own start-up, a few seconds, left out)."""
    text = (folder / "train.log").read_text() if (folder / "train.log").is_file() else ""
    points = []
    found = re.search(r"validation accuracy ([\d.]+), macro-F1 ([\d.]+) before the first step", text)
    if found:
        points.append({"cpu_seconds": probe_cpu, "val_accuracy": 100 * float(found[1]),
                       "val_macro_f1": 100 * float(found[2])})
    for line in re.findall(r" epoch \d+: (\{.*\})$", text, flags=re.M):
        row = ast.literal_eval(line)
        if "cpu_seconds" in row:
            points.append({"cpu_seconds": probe_cpu + float(row["cpu_seconds"]), "val_accuracy": 100 * row["val_accuracy"],
                           "val_macro_f1": 100 * row["val_macro_f1"]})
    return points


def recurve(rows: list[dict], work: Path) -> list[dict]:
    """Rows whose recipe folder is still in `work`, their curve read again from its train log."""
    for row in rows:
        folder = work / row["corpus"] / row["recipe"]
        if folder.is_dir():
            row["curve"] = curve(folder, row["probe cpu s"])
    return rows


def measure(corpus: str, root: Path, fraction: float, names: list[str], sets: list[str]) -> list[dict]:
    """Every recipe of `names` on one corpus -> its rows."""
    work = root / corpus
    shared = prepare(corpus, work, fraction, sets)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout
    kept = json.loads((work / "r.json").read_text())["kept"]  # documents ingest kept
    rows = []
    for name in names:
        overrides = RECIPES[name] + sets
        if missing := unknown(overrides):
            log.warning("recipe %s skipped: params.yaml has no %s yet", name, ", ".join(missing))
            continue
        try:
            cost = run_recipe(work, name, overrides, shared)
        except SystemExit as err:  # one recipe's failure (its log is in its folder) leaves the others to run
            log.error("recipe %s failed: %s", name, str(err)[-2000:])
            continue
        cpu = cost["probe cpu s"] + cost["train cpu s"]
        rows.append({"corpus": corpus, "recipe": name, "fraction": fraction, "documents": kept, "CPU min": cpu / 60,
                     "wall min": (cost["probe wall s"] + cost["train wall s"]) / 60, **score(work, work / name),
                     **cost, "overrides": " ".join(BASE + overrides), "threads": os.environ.get("OMP_NUM_THREADS", ""),
                     "cores": os.cpu_count(), "commit": commit.strip(), "date": datetime.date.today().isoformat(),
                     "curve": curve(work / name, cost["probe cpu s"])})
    return rows


COLUMNS = ["corpus", "recipe", "CPU min", "wall min", "fine-tune acc", "fine-tune macro-F1", "baseline acc",
           "baseline macro-F1", "blend w", "blend acc", "blend macro-F1", "fine-tune silent", "blend silent"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpora", nargs="+", default=list(CORPORA), choices=CORPORA)
    parser.add_argument("--fraction", type=float, default=None, help="of each class (default: FRACTION's)")
    parser.add_argument("--recipes", nargs="+", default=DEFAULT_RECIPES, choices=list(RECIPES), metavar="RECIPE",
                        help=f"of {', '.join(RECIPES)} (default: {' '.join(DEFAULT_RECIPES)})")
    parser.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                        help="a param over every recipe and the data stages")
    parser.add_argument("--work", type=Path, default=Path("/tmp/recipes-bench"))
    parser.add_argument("--out", type=Path, default=Path("/tmp/recipes-bench/recipes.jsonl"),
                        help="JSON lines, appended to")
    parser.add_argument("--plot", type=Path, help="PNG: scores against CPU-minutes, every line of --out")
    parser.add_argument("--plot-only", action="store_true", help="draw --plot from --out (curves read again from --work), run nothing")
    args = parser.parse_args()
    if not args.plot_only:
        root = args.work.resolve()
        rows = []
        for corpus in args.corpora:
            rows += measure(corpus, root, args.fraction or FRACTION[corpus], args.recipes, args.set)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            with args.out.open("a") as out:  # after each corpus: a stopped run keeps what it measured
                out.writelines(json.dumps(r) + "\n" for r in rows if r["corpus"] == corpus)
        log.info("recipes, BASE %s, --set %s, %s threads:\n\n%s\n", " ".join(BASE), " ".join(args.set) or "none",
                 os.environ.get("OMP_NUM_THREADS", "all"), table(rows, COLUMNS))
    else:  # the curves read again from the recipes' logs still in --work (a run's own, if it lost them)
        rows = recurve([json.loads(line) for line in args.out.read_text().splitlines()], args.work.resolve())
        args.out.write_text("".join(json.dumps(r) + "\n" for r in rows))
    if args.plot:
        from recipes_plot import plot
        plot(args.out, args.plot)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    main()
