"""The `muster` command line: one module per command group, dispatched by `main.py`."""
