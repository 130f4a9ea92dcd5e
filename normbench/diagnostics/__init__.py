"""Measurements that train nothing: `normbench bench` (speed) and `normbench probe` (signal at init)."""

# What `bench` and `probe` measure by default. A plain constant, no imports: `normbench --help` stays fast.
MISSION_LAYERS = ("layernorm", "rmsnorm", "learnable_scaler", "layerscale", "rezero", "fixup")
# The block families (normbench/layers/hyper_connections.py, mhc.py, ngpt.py), benched against layernorm
# (scripts/bench_families.py, results/bench-families/)
FAMILY_LAYERS = ("layernorm", "hc", "hc_dynamic", "mhc", "ngpt")
