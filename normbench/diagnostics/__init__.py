"""Measurements that train nothing: `normbench bench` (speed) and `normbench probe` (signal at init)."""

# What `bench` and `probe` measure by default. A plain constant, no imports: `normbench --help` stays fast.
MISSION_LAYERS = ("layernorm", "rmsnorm", "learnable_scaler", "layerscale", "rezero", "fixup")
