"""textclf: shared code for the DVC stages that fine-tune BERT-family classifiers.

The layers, top to bottom, are in docs/architecture.md. Importing it does nothing else."""
