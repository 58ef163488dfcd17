#!/bin/bash
if [ "$(cat /app/result.txt 2>/dev/null)" = "3" ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt
