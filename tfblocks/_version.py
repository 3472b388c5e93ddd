"""The package version (one home: setup.py and run-folder markers read it here)."""

__version__ = "0.1.0"
