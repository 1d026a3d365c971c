"""textclf: shared code for the DVC stages that fine-tune BERT-family classifiers."""
import os

# Model hubs are usually unreachable where this runs; fail fast instead of retrying.
# Set HF_HUB_OFFLINE=0 to let transformers download hub models.
os.environ.setdefault("HF_HUB_OFFLINE", "1")
