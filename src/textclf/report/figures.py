"""The report's figures, drawn with matplotlib and returned as PNG bytes
(embedded in report.html, so the report stays one file)."""
from __future__ import annotations

import io

import numpy as np
import pandas as pd
from matplotlib.figure import Figure  # not pyplot: no global backend to choose, no display needed

DPI = 110


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


def confusion_heatmap(confusion: dict[str, dict[str, int]]) -> bytes:
    """Rows: actual, columns: predicted; each cell shows its count."""
    labels = list(confusion)
    matrix = np.array([[confusion[a][p] for p in labels] for a in labels])  # (C, C)
    size = 1.2 + 0.7 * len(labels)
    fig = Figure(figsize=(size + 1, size))
    ax = fig.subplots()
    image = ax.imshow(matrix, cmap="Blues")
    ax.set_xticks(range(len(labels)), labels, rotation=45, ha="right")
    ax.set_yticks(range(len(labels)), labels)
    ax.set(xlabel="predicted", ylabel="actual", title="confusion matrix (test)")
    threshold = matrix.max() / 2 if matrix.size else 0
    for (i, j), count in np.ndenumerate(matrix):
        ax.text(j, i, str(count), ha="center", va="center",
                color="white" if count > threshold else "black")
    fig.colorbar(image, ax=ax, fraction=0.046, pad=0.04)
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


def token_lengths(histogram: pd.DataFrame, max_length: int) -> bytes:
    """Documents per token-length bucket; the red line is tokenize.max_length."""
    fig = Figure(figsize=(6, 3))
    ax = fig.subplots()
    widths = histogram["tokens_to"] - histogram["tokens_from"]
    ax.bar(histogram["tokens_from"], histogram["documents"], width=widths, align="edge",
           edgecolor="black", alpha=0.8)
    ax.axvline(max_length, color="tab:red", label=f"max_length {max_length}")
    ax.set(xlabel="tokens (untruncated)", ylabel="documents", title="token lengths")
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
