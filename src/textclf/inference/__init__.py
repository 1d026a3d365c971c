"""Class probabilities from a trained model: the forward path, the Predictor, the pyfunc.
Imports neither ingest code nor the training loop (tests/test_layers.py)."""
