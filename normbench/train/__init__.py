"""One cell of training: build -> fit -> result. Schedule, optimizer groups, auxiliary losses, telemetry,
DDP. Knows nothing of MLflow or Optuna."""
