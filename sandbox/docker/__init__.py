"""The docker backend: one hardened container per trial (DESIGN §6)."""
