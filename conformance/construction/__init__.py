"""How the fresh model a checkpoint is loaded into is built: an axis of the matrix."""
