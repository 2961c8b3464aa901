"""What the commands `undercap run` and `undercap compare` do, one module each
(run.py, compare.py), from the shared pieces in common.py (training set-up, cached
profiles, weights and estimates) and baselines.py (the safe frequency)."""
