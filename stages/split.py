"""Stage split: corpus.parquet -> seeded, group-aware split assignment (each near-duplicate
group in one split; stable under added and removed documents by default) + per-split class
counts and the groups moved to give every class every split."""
from __future__ import annotations

from textclf.data.split_stage import SplitPaths, run_split
from textclf.stage import run_stage, setup_logging, stage_parser


def main(argv: list[str] | None = None) -> None:
    parser = stage_parser(__doc__)
    parser.add_argument("--corpus", required=True)
    parser.add_argument("--splits", required=True, help="output parquet: doc_id -> split")
    parser.add_argument("--counts", required=True, help="output JSON: class counts per split")
    args = parser.parse_args(argv)
    setup_logging()
    run_split(SplitPaths(**vars(args)))


if __name__ == "__main__":
    run_stage(main)
