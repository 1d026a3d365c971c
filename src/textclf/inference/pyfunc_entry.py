"""MLflow "models from code" entry point: MLflow runs this file to build the pyfunc,
so the logged model holds no pickle (safetensors weights + source only)."""
from mlflow.models import set_model

from textclf.inference.serving import TextClassifier

set_model(TextClassifier())
