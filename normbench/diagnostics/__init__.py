"""Measurements that train nothing: `normbench bench` (speed) and `normbench probe` (signal at init)."""
