#!/usr/bin/env python3
"""Reads the RESULT lines of kmbench (bench, ooc) and torch_lloyd.py from the logs in OUTDIR and prints the
GPU results table in Markdown (scripts/gpu-run writes it to OUTDIR/results.md and prints it last)."""
import re
import sys
from pathlib import Path


def parse(path):
    rows = []
    if not path.exists():
        return rows
    for line in path.read_text(errors="replace").splitlines():
        m = re.match(r"^(RESULT\w*) (.*)$", line)
        if not m:
            continue
        kv = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', m.group(2)))
        kv["_tag"] = m.group(1)
        rows.append(kv)
    return rows


def ms_table(rows, tag, torch_ms, ms_key, kind_key, ms_head, title):
    """A (shape, data, kind, ms, × torch) table of the rows tagged `tag`; nothing when there are none."""
    rows = [r for r in rows if r["_tag"] == tag]
    if not rows:
        return
    print(f"\n{title}\n")
    print(f"| shape (N, D, K) | data | {kind_key} | {ms_head} | × torch |")
    print("|---|---|---|---|---|")
    for r in rows:
        t = torch_ms.get(("fp16" if r["in"] == "f16" else "fp32", r["n"], r["d"], r["k"]))
        ms = float(r[ms_key])
        print(f"| {int(r['n']):,}, {r['d']}, {r['k']} | {r['in']} | {r[kind_key]} | {ms:.2f} | "
              f"{f'{t / ms:.1f}×' if t else '—'} |")


def main():
    out = Path(sys.argv[1])
    kern = [r for r in parse(out / "bench-kernels.log") if r["_tag"] == "RESULT"]
    torch_rows = parse(out / "bench-torch.log")
    ooc = parse(out / "bench-ooc.log")
    device = ""
    dev_file = out / "device.txt"
    if dev_file.exists():
        device = dev_file.read_text().strip().splitlines()[0]
    torch_ms = {(r["dtype"], r["n"], r["d"], r["k"]): float(r["ms_per_iter"]) for r in torch_rows}
    print(f"### kmfleet CUDA backend — {device}\n")
    print("Full Lloyd iteration (assign + the statistics (sums) + the update on the device), data resident, random normal unless noted.\n")
    print("| shape (N, D, K) | data | kernel | sums | ms/iter | assign ms | eff. TFLOP/s | recheck rows | torch ms/iter | × torch |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in kern:
        tkey = ("fp16" if r["in"] == "f16" else "fp32", r["n"], r["d"], r["k"])
        t = torch_ms.get(tkey)
        ms = float(r["ms_per_iter"])
        ratio = f"{t / ms:.1f}×" if t else "—"
        print(f"| {int(r['n']):,}, {r['d']}, {r['k']} | {r['in']} {r['data']} | {r['kernel']} | {r.get('sums', 'accumulate')} | {ms:.2f} | "
              f"{float(r['assign_ms']):.2f} | {r['tflops']} | {r['recheck_last']} | {t if t else '—'} | {ratio} |")
    ms_table(parse(out / "bench-pass.log"), "RESULT_PASS", torch_ms, "ms_per_pass", "kernel", "ms/pass",
             "One fit pass through the Backend (what the engine runs: per-chunk stages, label copies, host side):")
    ms_table(parse(out / "bench-engine.log"), "RESULT_ENGINE", torch_ms, "ms_per_iter", "precision", "ms/iter",
             "One Lloyd iteration through the Engine (the addon: Backend pass + the Engine's update), rows resident:")
    ab = parse(out / "bench-assign.log")
    if ab:
        print("\nAssignment kernel alone (same operands): Hopper wgmma path vs the portable mma.sync one:\n")
        print("| shape (N, D, K) | operands | Hopper ms | portable ms | speed-up |")
        print("|---|---|---|---|---|")
        for line in (out / "bench-assign.log").read_text(errors="replace").splitlines():
            m = re.match(r"RESULT assign n=(\d+) d=(\d+) k=(\d+) (\w+) hopper_ms=([\d.]+) \((\d+) TFLOP/s\) "
                         r"portable_ms=([\d.]+) \((\d+) TFLOP/s\) speedup=([\d.]+)x", line)
            if m:
                n, d, k, op, h, ht, p_, pt, sp = m.groups()
                print(f"| {int(n):,}, {d}, {k} | {op} | {h} ({ht} TFLOP/s) | {p_} ({pt} TFLOP/s) | {sp}× |")
    if ooc:
        bw = [r for r in ooc if r["_tag"] == "RESULT_H2D"]
        print(f"\nOut of core through the Backend (host pinned buffers → GPU), H2D measured "
              f"{bw[0]['gbps'] if bw else '?'} GB/s:\n")
        print("| shape (N, D, K) | kernel | variant | chunk rows | resident rows | streamed GB | ms/pass | compute ms | "
              "H2D-bound ms | ÷ max(compute, H2D) |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        for r in ooc:
            if r["_tag"] != "RESULT_OOC":
                continue
            variant = r.get("path", "shipped")
            if "error" in r:
                print(f"| {r['n']}, {r['d']}, {r['k']} | {r['kernel']} | {variant} | error: {r['error']} | | | | | | |")
                continue
            print(f"| {int(r['n']):,}, {r['d']}, {r['k']} | {r['kernel']} | {variant} | {int(r['chunk']):,} | "
                  f"{int(r['resident']):,} | {r['streamed_gb']} | {r['ms_per_pass']} | {r['compute_ms']} | {r['io_ms']} | "
                  f"{r['ratio_to_bound']} |")


if __name__ == "__main__":
    main()
