"""Test helpers for models (tiny checkpoints, hub shapes). A regular package, not a namespace
one: python-sat (the uoo extra, in .[test]) installs a script `models.py` into the
environment's bin folder, which is on sys.path when pytest runs from there, and a regular module
anywhere on the path wins over a namespace package (`import models.tiny` would fail)."""
