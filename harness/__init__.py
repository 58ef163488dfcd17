"""harness: evaluate AI agents in isolated sandboxes, with honest statistics."""

__version__ = "0.1.0"
