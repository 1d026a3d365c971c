"""The report's figures, drawn with matplotlib and returned as PNG bytes
(embedded in report.html, so the report stays one file)."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
from matplotlib.figure import Figure  # not pyplot: no global backend to choose, no display needed

DPI = 110
ANNOTATED = 12  # classes up to which each confusion cell shows its count


def _png(fig) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    return buf.getvalue()


def training_curves(curve: pd.DataFrame) -> bytes:
    """Train and validation loss (left) and validation accuracy / macro-F1 / top class share (right) per
    epoch: a collapse shows as the top share jumping towards 1."""
    fig = Figure(figsize=(9, 3.2))
    loss_ax, val_ax = fig.subplots(1, 2)
    loss_ax.plot(curve["epoch"], curve["train_loss"], marker="o", label="train")
    if "val_loss" in curve:
        loss_ax.plot(curve["epoch"], curve["val_loss"], marker="o", label="validation")
    loss_ax.set(title="loss", xlabel="epoch", ylabel="cross-entropy")
    loss_ax.legend(loc="upper right")
    for column in ("val_accuracy", "val_macro_f1", "top_share"):
        val_ax.plot(curve["epoch"], curve[column], marker="o", label=column.replace("val_", ""))
    val_ax.set(title="validation", xlabel="epoch", ylim=(0, 1.02))
    val_ax.legend(loc="lower right")
    for ax in (loss_ax, val_ax):
        ax.xaxis.get_major_locator().set_params(integer=True)
        ax.grid(alpha=0.3)
    return _png(fig)


def confusion_heatmap(labels: list[str], counts: np.ndarray, shares: np.ndarray) -> bytes:
    """Rows: actual, columns: predicted; the colour is the share of the actual class's
    documents (each row sums to 1, so a small class reads as plainly as a large one). Up to
    ANNOTATED classes each cell shows its count; beyond, the figure is sized to the page width
    and its labels shrink to fit, the count left to the largest-confusions table."""
    n = len(labels)
    annotate = n <= ANNOTATED
    size = 1.2 + 0.7 * n if annotate else 9.5
    fig = Figure(figsize=(size + 1, size))
    ax = fig.subplots()
    image = ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    font = None if annotate else max(4.0, min(8.0, 420 / max(n, 1)))
    ax.set_xticks(range(n), labels, rotation=45 if annotate else 90, ha="right" if annotate else "center",
                  fontsize=font)
    ax.set_yticks(range(n), labels, fontsize=font)
    ax.set(xlabel="predicted", ylabel="actual", title="confusion matrix (test): share of each actual class")
    if annotate:
        for (i, j), count in np.ndenumerate(counts):
            ax.text(j, i, str(count), ha="center", va="center", color="white" if shares[i, j] > 0.5 else "black")
    else:  # a grid, so a cell can be followed to its labels
        ax.set_xticks(np.arange(n + 1) - 0.5, minor=True)
        ax.set_yticks(np.arange(n + 1) - 0.5, minor=True)
        ax.grid(which="minor", color="#e0e0e0", linewidth=0.3)
        ax.tick_params(which="minor", length=0)
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04, label="share of the actual class")
    return _png(fig)


def reliability_diagram(bins: list[dict], ece: float, which: str = "") -> bytes:
    """Accuracy against mean confidence per confidence bin; the diagonal is perfect
    calibration. Bar width is the bin, the count is written above it."""
    fig = Figure(figsize=(4.5, 4))
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1], linestyle="--", color="grey", label="perfect calibration")
    for b in bins:
        ax.bar(b["low"], b["accuracy"], width=b["high"] - b["low"], align="edge",
               edgecolor="black", color="tab:blue", alpha=0.7)
        ax.text((b["low"] + b["high"]) / 2, min(b["accuracy"] + 0.02, 1.0), str(b["count"]),
                ha="center", fontsize=7)
    ax.plot([b["confidence"] for b in bins], [b["accuracy"] for b in bins], "o-", color="tab:red",
            label="accuracy at mean confidence")
    ax.set(xlim=(0, 1), ylim=(0, 1.05), xlabel="confidence (predicted class probability)",
           ylabel="accuracy", title=f"reliability{' ' + which if which else ''} (ECE {ece:.3f})")
    ax.legend(loc="upper left", fontsize=8)
    return _png(fig)


def long_tail(histogram: pd.DataFrame) -> int:
    """The documents in the token-length histogram's last bin where that bin is the long tail's
    (data.tokens.length_histogram: from the 99th percentile to a length past twice it), else 0.
    A bin of equal-width bins never spans that much."""
    if len(histogram) < 2:
        return 0
    last = histogram.iloc[-1]
    return int(last["documents"]) if last["tokens_to"] > 2 * last["tokens_from"] else 0


def token_lengths(histogram: pd.DataFrame, max_length: int) -> bytes:
    """Documents per token-length bucket; the red line is tokenize.max_length. The long tail's
    bin (long_tail) is counted in the title, not drawn: one outlier would stretch the axis."""
    beyond = long_tail(histogram)
    drawn = histogram.iloc[:-1] if beyond else histogram
    fig = Figure(figsize=(6, 3))
    ax = fig.subplots()
    widths = drawn["tokens_to"] - drawn["tokens_from"]
    ax.bar(drawn["tokens_from"], drawn["documents"], width=widths, align="edge", edgecolor="black", alpha=0.8)
    ax.axvline(max_length, color="tab:red", label=f"max_length {max_length}")
    title = "token lengths"
    if beyond:
        last = histogram.iloc[-1]
        title += f": {beyond} longer document(s), {last['tokens_from']}–{last['tokens_to']} tokens, not drawn"
    ax.set(xlabel="tokens (untruncated)", ylabel="documents", title=title)
    ax.legend()
    return _png(fig)


def review_curve(curve: pd.DataFrame, point: tuple[float, float] | None) -> bytes:
    """Accuracy on the answered documents against the share answered, one point per
    serve.review_below (the top probability alone, and with the set rule where there are
    sets); the star is the operating point of the params."""
    fig = Figure(figsize=(5, 3.6))
    ax = fig.subplots()
    ax.plot(curve["answered_share"], curve["accuracy"], "o-", markersize=3, label="top probability ≥ review_below")
    if "answered_share_sets" in curve:
        ax.plot(curve["answered_share_sets"], curve["accuracy_sets"], "s-", markersize=3,
                label="and a one-label prediction set")
    if point is not None:
        ax.plot(*point, "*", color="tab:red", markersize=14, label="operating point (params)")
    ax.set(xlim=(0, 1.02), xlabel="share of test documents answered (not needs_review)",
           ylabel="accuracy on the answered", title="coverage–accuracy")
    ax.grid(alpha=0.3)
    ax.legend(loc="lower left", fontsize=8)
    return _png(fig)
