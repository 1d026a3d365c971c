"""Scores: test metrics, calibration, the paired comparison with the baseline, the baseline."""
