"""python -m harness."""

from harness.cli.app import main

main()
