"""Training: the loop, checkpoints, guards, the multi-process launcher, and the stage's run."""
