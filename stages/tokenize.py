"""Stage tokenize: corpus.parquet -> unpadded token ids + token-length stats.

Run as `python -m stages.tokenize` (a script named tokenize.py run by path would
shadow the standard library's tokenize module).
"""
from __future__ import annotations

import logging

import pandas as pd

from textclf.config import load_params
from textclf.io import run_stage, setup_logging, stage_parser, write_csv, write_json
from textclf.data.tokens import length_histogram, length_stats, load_ids_tokenizer, write_tokens

log = logging.getLogger("tokenize")


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--tokens", required=True, help="output parquet of token ids")
    parser.add_argument("--stats", required=True, help="output token-length stats JSON")
    parser.add_argument("--histogram", required=True, help="output CSV: documents per length bin")
    args = parser.parse_args(argv)
    setup_logging()
    params = load_params(args.params)
    cfg, model = params.tokenize, params.model
    tokenizer = load_ids_tokenizer(model.name)
    lengths = write_tokens(tokenizer, args.corpus, cfg, args.tokens)
    stats = length_stats(lengths, cfg.max_length)
    write_json(args.stats, stats)
    write_csv(pd.DataFrame(length_histogram(lengths)), args.histogram)
    log.info("tokenized %d documents: %s", len(lengths), stats)


if __name__ == "__main__":
    run_stage(main)
