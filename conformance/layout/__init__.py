"""How a cell's model is spread over its world: one Layout object per (wrapper, sharding)."""
