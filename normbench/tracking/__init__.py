"""MLflow: one experiment per suite, one run per cell; the only package that imports mlflow; `normbench ui`."""
