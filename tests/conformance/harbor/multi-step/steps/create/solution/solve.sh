#!/bin/bash
set -euo pipefail
cat /app/word.txt > /app/notes.txt
