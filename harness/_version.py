"""The version of harness, in one place.

Kept in a module of its own so that code inside the package (the runner records it in every
run dir's ``config.toml``) reads it without importing the package root, whose ``__init__``
imports the API and the runner in turn.
"""

__version__ = "0.1.0"

__all__ = ["__version__"]
