"""The leaderboard's parts: `stats` (pure functions on cell frames: lr selection, t intervals, paired differences,
claims), `tables` (markdown), `plots`, `telemetry_figures` (per-block telemetry at the selected lr), `transfer` (does
a reference suite's layer ranking hold here) and `machine` (the machine line every report carries).

normbench/report/leaderboard.py reads the ledger and writes the files; everything else here takes and returns
DataFrames. The selection rule itself (`select`, `score`, which lr a row takes) is normbench/contracts/selection.py.
"""
