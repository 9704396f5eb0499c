"""Reads sales rows from CSV and prints totals per region and month."""
import csv
import sys
from collections import defaultdict
from datetime import datetime


def parse_row(row):
    date = datetime.strptime(row["date"], "%Y-%m-%d")
    amount = float(row["amount"])
    return row["region"].strip().title(), date.strftime("%Y-%m"), amount


def load(path):
    totals = defaultdict(float)
    skipped = 0
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            try:
                region, month, amount = parse_row(row)
            except (KeyError, ValueError):
                skipped += 1
                continue
            totals[(region, month)] += amount
    return totals, skipped


def report(totals):
    regions = sorted({region for region, _ in totals})
    months = sorted({month for _, month in totals})
    print("region".ljust(12) + "".join(m.rjust(12) for m in months))
    for region in regions:
        cells = [totals.get((region, m), 0.0) for m in months]
        print(region.ljust(12) + "".join(f"{c:12.2f}" for c in cells))


def main(argv):
    if len(argv) != 2:
        print("usage: csv_report.py FILE", file=sys.stderr)
        return 2
    totals, skipped = load(argv[1])
    report(totals)
    if skipped:
        print(f"skipped {skipped} malformed rows", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
