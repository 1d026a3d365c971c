"""Scoring a table on Apache Spark with a logged model (`python -m textclf.spark`): pyspark is
an optional extra, imported by this package only."""
