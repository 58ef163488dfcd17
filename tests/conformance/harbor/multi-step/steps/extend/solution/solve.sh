#!/bin/bash
set -euo pipefail
# The agent of this step must see no test or solution of any step.
if ls /tests/* /solution/../tests 2>/dev/null | grep -q .; then exit 3; fi
echo "step two" >> /app/notes.txt
