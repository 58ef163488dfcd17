#!/bin/bash
set -euo pipefail
{
  id -un
  pwd
  echo "$TASK_MODE"
  head -n1 "$HARNESS_SKILLS_DIR/hint.md"
} > notes.txt
