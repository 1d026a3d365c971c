"""What a model is: heads, build/save/load, the encoder policy, and its input batches."""
