"""`python -m textclf.spark` as a file, for spark-submit (which runs files, not modules):

    spark-submit --master spark://head:7077 scripts/spark_score.py models:/textclf@champion \
        s3a://bucket/tickets/ --format parquet --out s3a://bucket/preds/
"""
from textclf.stage import run_stage
from textclf.spark.__main__ import main

if __name__ == "__main__":
    run_stage(main)
