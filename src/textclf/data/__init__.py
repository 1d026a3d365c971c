"""Corpus data, light: sources, decoding, the corpus rules, near-duplicates, the split and
token ids. No torch, transformers or MLflow here (ingest, split and tokenize stay fast to start)."""
