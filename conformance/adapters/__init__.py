"""Adapters: the checkpoint code of the frameworks people run, as registered strategies.

Each adapter only puts the framework's own objects in place (inside the world's existing
process group, on the world's device) and then calls the framework's own save and load: the
point is to test that code, never to change it. Each is an optional extra: without the
framework, its cells are skips that name it (`pip install -e '.[adapters]'` installs them).
"""
