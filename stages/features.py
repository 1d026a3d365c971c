"""Stage features: token ids + split -> the frozen encoder's features of the training and
validation rows (what the classifier's last layer reads), from which train fits LP-FT's probe
head (train.head_init: probe) before its first step. One forward pass, no backward; cached by
DVC per data version and model, so a change of learning rate or budget does not pay it again.
With train.head_init: random (or train.method: setfit) it writes an empty file and says why.
"""
from __future__ import annotations

from textclf.stage import run_stage, setup_logging, stage_parser
from textclf.train.features import run_features


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--tokens", required=True)
    parser.add_argument("--splits", required=True)
    parser.add_argument("--out", required=True, help="output safetensors: train and validation features")
    args = parser.parse_args(argv)
    setup_logging()
    run_features(args.tokens, args.splits, args.out, args.params)


if __name__ == "__main__":
    run_stage(main)
