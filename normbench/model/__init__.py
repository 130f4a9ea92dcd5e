"""The deep-ViT template built from timm's parts, and its registration with timm."""
