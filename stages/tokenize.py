"""Stage tokenize: corpus.parquet -> unpadded token ids + token-length stats.

Run as `python -m stages.tokenize` (a script named tokenize.py run by path would
shadow the standard library's tokenize module).
"""
from __future__ import annotations

from textclf.data.tokens import TokenizePaths, run_tokenize
from textclf.stage import run_stage, setup_logging, stage_parser


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokens", required=True, help="output parquet of token ids")
    parser.add_argument("--stats", required=True, help="output token-length stats JSON")
    parser.add_argument("--histogram", required=True, help="output CSV: documents per length bin")
    args = parser.parse_args(argv)
    setup_logging()
    run_tokenize(TokenizePaths(**vars(args)))


if __name__ == "__main__":
    run_stage(main)
