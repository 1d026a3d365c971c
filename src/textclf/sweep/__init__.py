"""Guarded hyperparameter sweeps: Optuna chooses, each trial is a queued DVC experiment of the
pipeline, the guards judge every trial, MLflow holds the study as a parent run (docs/sweeps.md)."""
