#!/bin/bash
source /tests/common.sh
check [ "$(sed -n 1p /app/notes.txt)" = "harbor" ]
check [ "$(sed -n 2p /app/notes.txt)" = "step two" ]
check [ -f /app/extra.txt ]
finish
