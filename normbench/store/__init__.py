"""The ledger of cells (an Optuna storage), its journal file, OS locks and retries of a server that is away."""
