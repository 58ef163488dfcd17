"""Grade report.csv for sales-report and write reward.json with partial credit.

Usage: grade.py SALES_CSV REPORT_CSV REWARD_JSON

The expected report is recomputed here from the pristine copy of the input that
ships with the tests (SALES_CSV), never from the workspace copy, so editing
data/sales.csv cannot change what counts as correct.

Criteria (each 0 or 1): format, correct, sorted; reward = their mean.
"""

import csv
import io
import json
import re
import sys
from decimal import Decimal, InvalidOperation

HEADER = ["region", "orders", "units", "revenue"]
INT = re.compile(r"^[0-9]+$")
MONEY = re.compile(r"^-?[0-9]+\.[0-9]{2}$")


def expected_rows(sales_path):
    """Return [(region, orders, units, revenue)] sorted as the task asks."""
    totals = {}
    with open(sales_path, newline="", encoding="utf-8") as f:
        for row in csv.DictReader(f):
            t = totals.setdefault(row["region"], [0, 0, Decimal(0)])
            t[0] += 1
            t[1] += int(row["units"])
            t[2] += int(row["units"]) * Decimal(row["unit_price"])
    ordered = sorted(totals.items(), key=lambda kv: (-kv[1][2], kv[0]))
    return [(r, o, u, rev) for r, (o, u, rev) in ordered]


def read_report(path):
    """Return the report's rows as lists of strings, or None if unreadable."""
    try:
        with open(path, "rb") as f:
            data = f.read(1_000_000)
        text = data.decode("utf-8")
        return list(csv.reader(io.StringIO(text, newline="")))
    except (OSError, UnicodeDecodeError, csv.Error):
        return None


def grade(sales_path, report_path):
    """Return the criteria dict for one report."""
    scores = {"format": 0.0, "correct": 0.0, "sorted": 0.0}
    want = expected_rows(sales_path)
    rows = read_report(report_path)
    if not rows:
        print("report.csv is missing, empty or unreadable")
        return scores
    header, body = rows[0], rows[1:]

    well_formed = (
        header == HEADER
        and len(body) > 0
        and all(
            len(r) == 4
            and r[0] != ""
            and r[0] == r[0].strip()
            and INT.match(r[1])
            and INT.match(r[2])
            and MONEY.match(r[3])
            for r in body
        )
    )
    scores["format"] = 1.0 if well_formed else 0.0
    print(f"format:  {'ok' if well_formed else 'wrong header, blank line or malformed row'}")

    got = {}
    for r in body:
        if len(r) != 4:
            continue
        try:
            got[r[0]] = (int(r[1]), int(r[2]), Decimal(r[3]))
        except (ValueError, InvalidOperation):
            continue
    right = {r: (o, u, rev) for r, o, u, rev in want}
    values_ok = got == right and len(body) == len(want)
    scores["correct"] = 1.0 if values_ok else 0.0
    print(f"correct: {'ok' if values_ok else 'values differ from the recomputed report'}")

    order_ok = [r[0] if r else "" for r in body] == [r for r, *_ in want]
    scores["sorted"] = 1.0 if order_ok else 0.0
    print(f"sorted:  {'ok' if order_ok else 'rows are not in the required order'}")
    return scores


def main():
    """Grade and write REWARD_JSON."""
    sales_path, report_path, reward_path = sys.argv[1:4]
    scores = grade(sales_path, report_path)
    scores["reward"] = round(sum(scores.values()) / 3, 4)
    with open(reward_path, "w", encoding="utf-8") as f:
        json.dump(scores, f, sort_keys=True)
        f.write("\n")
    print(json.dumps(scores, sort_keys=True))


if __name__ == "__main__":
    main()
