"""Torch versions: a cached venv per version (venv.py) and the command that publishes a
version's table from it (publish.py). The top of the flow: it runs the suite as a user runs
it, in a process of that version's own, and reads only what the run wrote."""
