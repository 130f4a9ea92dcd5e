"""The leaderboard's parts: `stats` (pure functions on cell frames), `tables` (markdown), `plots`, `claims`,
`transfer` (does a reference suite's layer ranking hold here).

normbench/report/leaderboard.py reads the ledger and writes the files; everything here takes and returns DataFrames.
"""
