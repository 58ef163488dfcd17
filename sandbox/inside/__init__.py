"""The code shipped into every sandbox: stdlib only, runs on Python 3.9.

Every module of this folder is copied (or compiled) flat into one root-only dir of each
sandbox, beside the supervisor (:data:`sandbox.backend.INSIDE_DIR`); the folder is the
boundary. A module here imports only the standard library and its siblings, first as
``sandbox.inside.<name>`` (in the harness), else as a plain ``<name>`` (inside a sandbox).
"""
