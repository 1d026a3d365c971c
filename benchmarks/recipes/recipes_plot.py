"""benchmarks/recipes/recipes.py's figure: test macro-F1 and accuracy against training CPU-minutes, one
column of panels per corpus, a colour per recipe, the baseline as a horizontal line.

    .venv/bin/python benchmarks/recipes/recipes_plot.py /tmp/recipes-bench/recipes.jsonl docs/recipes.png

Each JSON line is a marker at its recipe's CPU-minutes (runs accumulate: every line is drawn);
where train wrote cpu_seconds in its curve, the validations are a dashed line to it (validation
scores, not test: the trajectory, not the result). The baseline line is the latest line's
baseline of that corpus (the same data stages give the same baseline).
"""
from __future__ import annotations

import argparse
import json
import logging
from pathlib import Path

log = logging.getLogger("recipes-plot")
METRICS = (("macro-F1", "val_macro_f1"), ("acc", "val_accuracy"))  # a row's test score, its curve's column


def read(path: Path) -> list[dict]:
    """The JSON lines of `path`."""
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def plot(jsonl: Path, png: Path) -> None:
    """Draw every line of `jsonl` into `png`."""
    import matplotlib
    matplotlib.use("Agg")  # no display: a file only
    import matplotlib.pyplot as plt

    rows = read(jsonl)
    if not rows:
        raise SystemExit(f"{jsonl}: no measurements to draw")
    corpora = list(dict.fromkeys(r["corpus"] for r in rows))
    recipes = list(dict.fromkeys(r["recipe"] for r in rows))
    colour = {name: plt.get_cmap("tab10")(i % 10) for i, name in enumerate(recipes)}
    width = max(4.5 * len(corpora), 9)  # the legend below needs room even with one corpus
    fig, axes = plt.subplots(2, len(corpora), figsize=(width, 7.5), squeeze=False)
    for col, corpus in enumerate(corpora):
        mine = [r for r in rows if r["corpus"] == corpus]
        for row_i, (metric, curve_key) in enumerate(METRICS):
            ax = axes[row_i][col]
            for r in mine:
                ax.plot(r["CPU min"], r[f"fine-tune {metric}"], "o", color=colour[r["recipe"]])
                ax.plot(r["CPU min"], r[f"blend {metric}"], "^", color=colour[r["recipe"]], alpha=0.6)
                points = r.get("curve") or []
                if points:
                    ax.plot([p["cpu_seconds"] / 60 for p in points], [p[curve_key] for p in points], "--",
                            color=colour[r["recipe"]], alpha=0.5)
            ax.axhline(mine[-1][f"baseline {metric}"], color="black", lw=1, label="baseline (TF-IDF)")
            ax.set_title(f"{corpus} ({mine[-1]['classes']} classes): test {metric}")
            ax.set_xlabel("training CPU-minutes (probe + train)")
            ax.set_ylabel(f"{metric} %")
            ax.grid(alpha=0.3)
    handles = [plt.Line2D([], [], marker="o", ls="", color=colour[n], label=n) for n in recipes]
    handles += [plt.Line2D([], [], marker="^", ls="", color="grey", label="blend (w on validation)"),
                plt.Line2D([], [], ls="--", color="grey", label="validation curve"),
                plt.Line2D([], [], color="black", label="baseline")]
    ncol = max(2, int(width // 2.3))
    fig.legend(handles=handles, loc="lower center", ncol=ncol, fontsize=8)
    fig.tight_layout(rect=(0, 0.04 * (1 + len(handles) // ncol), 1, 1))
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    log.info("%d measurements on %d corpora -> %s", len(rows), len(corpora), png)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("jsonl", type=Path, help="benchmarks/recipes/recipes.py's --out")
    parser.add_argument("png", type=Path)
    args = parser.parse_args()
    plot(args.jsonl, args.png)


if __name__ == "__main__":
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s")
    main()
