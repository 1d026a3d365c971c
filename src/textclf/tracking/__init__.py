"""MLflow: the store, runs and their lineage, the model registry."""
