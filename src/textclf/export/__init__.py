"""The export stage's decision on validation: which exported format the folder keeps and
serves, its own calibration, and the blend with the baseline. Above evaluate, whose format
check and blend it runs; the ONNX conversion itself is a model concern (model.export)."""
