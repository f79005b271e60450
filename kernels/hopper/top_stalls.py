"""Prints the SASS instructions with the most stall samples from
`ncu --page source --print-source sass --csv` output on stdin."""
import csv
import sys

rows = list(csv.reader(sys.stdin))
head_i = next(i for i, r in enumerate(rows) if any("Source" == c for c in r))
head = rows[head_i]
body = rows[head_i + 1:]
src = head.index("Source")
cols = [i for i, c in enumerate(head) if "Warp Stall Sampling (All" in c]
col = cols[0]
print(head[col])
def num(x):
    try:
        return float(x.replace(",", ""))
    except ValueError:
        return 0.0
total = sum(num(r[col]) for r in body if len(r) > col)
ranked = sorted(body, key=lambda r: -num(r[col]) if len(r) > col else 0)
for r in ranked[:30]:
    print(f"{num(r[col]) / total:6.1%}  {r[0]:>6}  {r[src][:110]}")
