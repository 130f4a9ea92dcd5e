"""The leaderboard's parts: `stats` (pure functions on cell frames), `tables` (markdown), `plots`, `claims`.

normbench/leaderboard.py reads the ledger and writes the files; everything here takes and returns DataFrames.
"""
