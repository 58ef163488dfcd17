"""The isolation runtime: trial roots, env isolation, credentials, privilege drop, backends.

``sandbox`` never imports ``harness``. Its in-sandbox part, the folder ``sandbox/inside/``
(the supervisor and every module shipped beside it), is stdlib-only and runs on
Python >= 3.9 inside any task image.
"""
