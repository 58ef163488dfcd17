#!/bin/bash
source /tests/common.sh
check [ -f /app/setup-marker.txt ]
check [ "$(cat /app/notes.txt 2>/dev/null)" = "harbor" ]
finish
