# Shared by every step's tests (the task's top-level tests/ is copied under each step's).
[ "$GREETING" = "hello" ] || { echo "verifier env not resolved: $GREETING"; exit 1; }
failed=0
check() { "$@" || { echo "FAILED: $*"; failed=1; }; }
finish() { if [ "$failed" = 0 ]; then echo 1; else echo 0; fi > /logs/verifier/reward.txt; }
