#!/bin/bash
# Runs in the working dir before the step's agent.
set -e
test -f word.txt
echo "setup ran" > setup-marker.txt
