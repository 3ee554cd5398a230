#!/usr/bin/env python3
# Summary of bench/search_bench.sh: trials to 95% of the best speed per strategy, and the
# mean curves the PNG draws. usage: search_summary.py OUT TRIALS
import csv, statistics, sys, collections
out, trials = sys.argv[1], int(sys.argv[2])
level = float(sys.argv[3]) if len(sys.argv) > 3 else 0.95
pct = f"{level * 100:.0f}%"
runs = collections.defaultdict(list)  # (workload, strategy, seed, run) -> [(trial, best_s)]
for r in csv.DictReader(open(f"{out}/curves.csv")):
    runs[(r["workload"], r["strategy"], r["seed"], r["run"])].append((int(r["trial"]), float(r["config_s"])))
# Every run measures the default config first, alone (trial 1): that is not search. It is
# left out, trials renumbered from the first proposed config, and best-so-far recomputed.
for k, pts in runs.items():
    pts.sort()
    rest, b = [], 0.0
    for t, x in pts[1:]:
        if x > 0 and (b == 0 or x < b): b = x
        rest.append((t - 1, b))
    runs[k] = rest
trials -= 1
best = {}
for (w, s, seed, run), pts in runs.items():
    for _, b in pts:
        if b > 0: best[w] = min(best.get(w, float("inf")), b)
def to95(pts, b):
    for t, x in pts:
        if 0 < x <= b / level: return t
    return None  # never within 95% in this run
def report(strategies, title):
    print(title)
    med = {}
    for s in strategies:
        ts = []
        for (w, st, seed, run), pts in sorted(runs.items()):
            if st != s: continue
            t = to95(pts, best[w])
            ts.append(t if t is not None else trials + 1)
        if not ts: continue
        med[s] = statistics.median(ts)
        never = sum(1 for t in ts if t > trials)
        print(f"  {s:14s} runs {len(ts):2d}  median trials to {pct}: {med[s]:6.1f}  (never reached in {never}; counted as {trials + 1})")
        for w in sorted(best):
            per = [to95(p, best[w]) for (ww, st, seed, run), p in sorted(runs.items()) if st == s and ww == w]
            if not per: continue
            shown = " ".join(str(t) if t is not None else f">{trials}" for t in per)
            print(f"      {w:55s} {shown}")
    return med
# Strategies in the order they first appear; benchmark 3's are "<variant>-transfer"/"-cold".
order = list(dict.fromkeys(s for (_, s, _, _) in sorted(runs, key=lambda k: (int(k[2]), k[0]))))
search = [s for s in order if not s.endswith(("-transfer", "-cold"))]
xgbs = [s for s in search if s.startswith("xgb")]
m = report(search, f"Benchmark 1: search efficiency (configs measured to reach {pct} of the best speed any run found)")
# Random search's runs are often censored (never within 95% in the budget). Its expected
# trials follow from the share p of its measured configs that are within 95% (a geometric
# draw): 1/p, and more than the number of samples when none is.
raw = collections.defaultdict(list)
for r in csv.DictReader(open(f"{out}/curves.csv")):
    if r["strategy"] == "random" and int(r["trial"]) > 1:
        raw[r["workload"]].append(float(r["config_s"]))
expected = []
for w in sorted(raw):
    hits = sum(1 for x in raw[w] if 0 < x <= best[w] / level)
    n = len(raw[w])
    e = n / hits if hits else float("inf")
    expected.append(e if hits else n)
    print(f"  random, expected trials to {pct} on {w}: " + (f"{e:.0f} ({hits} of {n} random configs within {pct})" if hits else f"more than {n} (none of {n} random configs within {pct})"))
# Censoring: a median past the budget is only a lower bound. Dividing xgb's median by a lower
# bound of random's gives an upper bound of the ratio; the tightest bound decides the goal.
for x in xgbs:
    bounds = []
    if expected:
        em = statistics.median(expected)
        censored = m[x] > trials
        print(f"  {x} median / random's expected (median over workloads, at least {em:.0f}) = "
              + ("unknown: its own median is past the budget" if censored else f"at most {m[x] / em:.2f}"))
        if not censored:
            bounds.append(m[x] / em)
    if "random" in m:
        r_censored = m["random"] > trials
        ratio = m[x] / m["random"]
        print(f"  {x} / random = " + (f"at most {ratio:.2f} (random's median is past the budget)" if r_censored
                                       else f"{ratio:.2f}"))
        if m[x] <= trials:
            bounds.append(ratio)
    if bounds:
        b = min(bounds)
        print(f"  {x} needs at most {b:.2f} of random's trials (goal: at most 0.33: {'met' if b <= 0.33 else 'not shown'})")
    if "ga" in m:
        print(f"  {x} / ga     = {m[x] / m['ga']:.2f}" + (" (at most: ga's median is past the budget)" if m["ga"] > trials else ""))
variants = [s[:-len("-transfer")] for s in order if s.endswith("-transfer")]
t = report([f"{v}-{mode}" for v in variants for mode in ("transfer", "cold")],
           f"Benchmark 3: transfer on a new shape, trials to {pct} (xgb with the other shapes' records vs an empty database)")
for v in variants:
    if f"{v}-transfer" in t and f"{v}-cold" in t:
        tr, co = t[v + "-transfer"], t[v + "-cold"]
        note = (" (unknown: transfer's median is past the budget)" if tr > trials
                else " (at most: cold's median is past the budget)" if co > trials else "")
        print(f"  {v}: transfer / cold = {tr / co:.2f}{note} (goal: at most 0.5)")
# Mean normalised best-so-far per strategy and trial, for the PNG.
curve = collections.defaultdict(lambda: collections.defaultdict(list))
for (w, s, seed, run), pts in runs.items():
    last = 0.0
    d = dict(pts)
    for tr in range(1, trials + 1):
        if tr in d and d[tr] > 0: last = best[w] / d[tr]
        curve[s][tr].append(last)
with open(f"{out}/mean_curves.dat", "w") as f:
    for s in curve:
        f.write(f'"{s}"\n')
        for tr in range(1, trials + 1):
            f.write(f"{tr} {statistics.mean(curve[s][tr]):.4f}\n")
        f.write("\n\n")
# Where the mean curves reach what the baseline has at the end of its budget: the budget each
# strategy needs for the baseline's result (censoring-free, unlike the medians above).
def reach(strategies, base, title):
    if base not in curve:
        return
    goal = statistics.mean(curve[base][trials])
    print(title + f": mean best-so-far after {trials} configs: " +
          ", ".join(f"{s} {statistics.mean(curve[s][trials]):.3f}" for s in strategies if s in curve))
    for s in strategies:
        if s not in curve:
            continue
        r = next((tr for tr in range(1, trials + 1) if statistics.mean(curve[s][tr]) >= goal), None)
        print(f"  {s:14s} reaches {base}'s {trials}-config mean ({goal:.3f}) after " +
              (f"{r} configs ({r / trials:.2f} of the budget)" if r else f"more than {trials} configs"))
reach(search, "random", "Benchmark 1 (curves)")
for v in variants:
    reach([f"{v}-transfer", f"{v}-cold"], f"{v}-cold", f"Benchmark 3 (curves, {v})")
print(f"curves: {out}/curves.csv, {out}/curves.png")
