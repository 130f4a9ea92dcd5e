"""Running a suite's cells: run, worker, tune, lr bracketing and the progress line."""
