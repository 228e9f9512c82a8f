#!/usr/bin/env python3
"""Prints a flow-vs-libtorch table from Google Benchmark JSON files: best rate of each case
over the given runs. Usage: compare_bench.py [--graph|--deploy] FLOW.json... -- TORCH.json...
--graph: the eager / Graph / libtorch table of bench/graph_bench.cpp (cases <model>/<mode>/<threads>).
--deploy: the oneflow_lite / Graph / eager / libtorch inference latency table of bench/deploy_bench.cpp.
Ratio columns are speed ratios (rate a / rate b: above 1 means a is faster)."""
import json
import sys


def best_rates(paths):
    rates = {}
    for path in paths:
        with open(path) as f:
            for b in json.load(f)["benchmarks"]:
                for unit in ("GFLOP/s", "GB/s", "steps/s", "infer/s"):
                    if unit in b:
                        key = b["name"].split("/real_time")[0]
                        rates[key] = (max(rates.get(key, (0, unit))[0], b[unit]), unit)
    return rates


def best_compile_ms(paths):
    compile_ms = {}
    for path in paths:
        with open(path) as f:
            for b in json.load(f)["benchmarks"]:
                if "compile_ms" in b:
                    key = b["name"].split("/real_time")[0]
                    compile_ms[key] = min(compile_ms.get(key, float("inf")), b["compile_ms"])
    return compile_ms


MODE_LABELS = {"eager": "flow eager", "graph": "flow Graph", "lite": "oneflow_lite", "torch": "libtorch eager"}


def mode_table(flow_paths, torch_paths, modes, ratios, unit):
    """One row per model and thread count (plus the best of each mode over thread counts):
    each mode's rate (or latency for infer/s), the rate ratios asked for, and the first-call
    compile time of Graph cases."""
    rates = best_rates(flow_paths)
    rates.update(best_rates(torch_paths))
    compile_ms = best_compile_ms(flow_paths)
    models = sorted({key.split("/")[0] for key in rates}, key=lambda m: list(rates).index(next(k for k in rates if k.startswith(m + "/"))))
    show = (lambda rate: f"{1e6 / rate:.0f} us" if rate else "-") if unit == "infer/s" else (lambda rate: f"{rate:.1f} {unit}")
    header = ["model", "threads"] + [MODE_LABELS[m] for m in modes] + [f"{MODE_LABELS[a]} / {MODE_LABELS[b]}" for a, b in ratios]
    with_compile = "graph" in modes and unit == "steps/s"
    if with_compile:
        header.append("first-call compile")
    print("| " + " | ".join(header) + " |")
    print("|" + " --- |" * len(header))
    for model in models:
        threads = sorted({key.split("/")[2] for key in rates if key.startswith(model + "/")})
        best = {}
        for t in threads + ["best"]:
            if t == "best":
                row = best
            else:
                row = {mode: rates.get(f"{model}/{mode}/{t}", (0, ""))[0] for mode in modes}
                for mode, rate in row.items():
                    best[mode] = max(best.get(mode, 0), rate)
            cells = [model, t] + [show(row[m]) for m in modes]
            cells += [f"{row[a] / row[b]:.2f}" if row[a] and row[b] else "-" for a, b in ratios]
            if with_compile:
                ms = compile_ms.get(f"{model}/graph/{t}") if t != "best" else None
                cells.append(f"{ms:.1f} ms" if ms is not None else "")
            print("| " + " | ".join(cells) + " |")


def main():
    if sys.argv[1] in ("--graph", "--deploy"):
        split = sys.argv.index("--")
        if sys.argv[1] == "--graph":
            mode_table(sys.argv[2:split], sys.argv[split + 1:], ["eager", "graph", "torch"], [("graph", "eager"), ("graph", "torch")], "steps/s")
        else:
            mode_table(sys.argv[2:split], sys.argv[split + 1:], ["lite", "graph", "eager", "torch"], [("lite", "graph"), ("lite", "torch")], "infer/s")
        return
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
