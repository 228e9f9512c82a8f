#!/usr/bin/env python3
"""Prints a flow-vs-libtorch table from Google Benchmark JSON files: best rate of each case
over the given runs. Usage: compare_bench.py FLOW.json... -- TORCH.json..."""
import json
import sys


def best_rates(paths):
    rates = {}
    for path in paths:
        with open(path) as f:
            for b in json.load(f)["benchmarks"]:
                for unit in ("GFLOP/s", "GB/s", "steps/s"):
                    if unit in b:
                        key = b["name"].split("/real_time")[0]
                        rates[key] = (max(rates.get(key, (0, unit))[0], b[unit]), unit)
    return rates


def main():
    split = sys.argv.index("--")
    ours, theirs = best_rates(sys.argv[1:split]), best_rates(sys.argv[split + 1:])
    # The copy reference at the frameworks' thread count (the single-thread memcpy is shown too).
    memcpy = max((rate for key, (rate, _) in ours.items() if "memcpy_threads" in key), default=0)
    print("| case | flow | libtorch | flow / libtorch | flow / memcpy (same threads) |")
    print("| --- | --- | --- | --- | --- |")
    for key, (rate, unit) in ours.items():
        other = theirs.get(key, (0, unit))[0]
        ratio = f"{rate / other:.2f}" if other else "-"
        vs_memcpy = f"{rate / memcpy:.2f}" if unit == "GB/s" and memcpy and "memcpy" not in key else ""
        name = key.replace("bench::", "").replace("BM_", "")
        print(f"| {name} | {rate:.1f} {unit} | {other:.1f} {unit} | {ratio} | {vs_memcpy} |")


if __name__ == "__main__":
    main()
