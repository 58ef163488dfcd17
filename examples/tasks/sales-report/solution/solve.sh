#!/bin/bash
# Reference solution: csv + Decimal (exact money arithmetic), sort, write.
set -eu
export PATH=/usr/bin:/bin
cd "${HARNESS_WORKSPACE:-$PWD}"
python3 -I -B - <<'PY'
import csv
from decimal import Decimal

totals = {}
with open("data/sales.csv", newline="", encoding="utf-8") as f:
    for row in csv.DictReader(f):
        t = totals.setdefault(row["region"], [0, 0, Decimal(0)])
        units = int(row["units"])
        t[0] += 1
        t[1] += units
        t[2] += units * Decimal(row["unit_price"])

rows = sorted(totals.items(), key=lambda kv: (-kv[1][2], kv[0]))
with open("report.csv", "w", encoding="utf-8") as out:
    out.write("region,orders,units,revenue\n")
    for region, (orders, units, revenue) in rows:
        out.write(f"{region},{orders},{units},{revenue.quantize(Decimal('0.01'))}\n")
PY
