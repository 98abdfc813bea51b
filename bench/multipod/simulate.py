#!/usr/bin/env python3
"""One exact Lloyd iteration of a job spread over pods of 8 GPUs, simulated from numbers measured through the
product on one H100 (bench/RESULTS.md) and a network's bandwidth (docs/beyond-one-pod.md says what each term is).

    python3 bench/multipod/simulate.py [--rows 1e10] [--dims 128] [--k 4096] [--pods 4 16]

Per GPU, a share of the rows: as many as fit stay resident, the rest stream from the pod's host memory each pass.
Its pass takes max(compute, streamed bytes / H2D) × the overlap's measured efficiency. Then the exact statistics are
summed across every GPU: over NVLink inside a pod, then a ring all-reduce across pods; every GPU applies the same
update to the same integer totals, so nothing else moves. Standard library only.
"""
import argparse

# Measured through kmfleet fit on one H100 80GB (bench/RESULTS.md, "Data bigger than the GPU"; 16.8M×128 fp32, k=4096,
# exact fp32): every row resident, and every row streamed from the host tier; the pinned H2D bandwidth of that call.
MEASURED_ROWS = 16_800_000
MEASURED_K = 4096
MEASURED_DIMS = 128
RESIDENT_MS = 49.1
H2D_GBPS = 54.8
STREAMED_MS = 164.9
STREAMED_BOUND_MS = 157.0
OVERLAP = STREAMED_MS / STREAMED_BOUND_MS  # what the overlap of copies and compute costs over the bound

# The planner's device bytes of one resident row at D=128, exact fp32 (cuda/planner.cpp residentRowBytes + the exact
# statistics' scratch): fp32 values, fp16 hi/lo operands, scale/norm, label, distances, previous label, screen key.
def resident_row_bytes(d: int) -> int:
    return d * 4 + d * 2 * 2 + 8 + 8 + 4 + 4 + 16


GPU_MEMORY = 80e9 * 0.9      # an H100's memory less the planner's headroom, chunk slots and statistics (about)
GPUS_PER_POD = 8
NVLINK_GBPS = 300.0          # per-GPU NVLink all-reduce bus bandwidth inside an HGX H100 pod (NCCL, large messages)


def stats_bytes(k: int, d: int) -> int:
    """The exact statistics as NCCL can sum them: each 192-bit Σx and 384-bit Σ‖x‖² split into 32-bit limbs held in
    int64 (no carry is lost for up to 2^31 summands; one carry pass after), one limb more each for the headroom of more
    than 2^31 rows in all (exact_sums.h sizes its words for fewer), plus the counts."""
    sum_limbs = 7   # 192 bits / 32, + 1
    sq_limbs = 13   # 384 bits / 32, + 1
    return k * d * sum_limbs * 8 + k * sq_limbs * 8 + k * 8


def iteration(rows: float, d: int, k: int, pods: int, net_gbps: float, host_gbps: float, latency_us: float = 10.0):
    gpus = pods * GPUS_PER_POD
    per_gpu = rows / gpus
    resident = min(per_gpu, GPU_MEMORY / resident_row_bytes(d))
    streamed = per_gpu - resident
    # compute scales with rows × K × D from the measured all-resident pass
    compute_ms = RESIDENT_MS * (per_gpu / MEASURED_ROWS) * (k / MEASURED_K) * (d / MEASURED_DIMS)
    # each GPU's own PCIe link, unless the pod's host memory cannot feed eight of them at once
    link = min(H2D_GBPS, host_gbps / GPUS_PER_POD)
    stream_ms = streamed * d * 4 / (link * 1e9) * 1e3
    pass_ms = max(compute_ms, stream_ms) * (OVERLAP if streamed > 0 else 1.0)
    s = stats_bytes(k, d)
    # inside the pod: a ring over 8 GPUs on NVLink; across pods: a ring over the pods on the network (GB/s per pod)
    in_pod_ms = 2 * (GPUS_PER_POD - 1) / GPUS_PER_POD * s / (NVLINK_GBPS * 1e9) * 1e3
    across_ms = (2 * (pods - 1) / pods * s / (net_gbps * 1e9) * 1e3 + 2 * (pods - 1) * latency_us / 1e3) if pods > 1 else 0.0
    host_gb_per_pod = streamed * d * 4 * GPUS_PER_POD / 1e9
    return {
        'pods': pods, 'gpus': gpus, 'rows_per_gpu_m': per_gpu / 1e6, 'resident_m': resident / 1e6,
        'host_gb_per_pod': host_gb_per_pod, 'pass_ms': pass_ms, 'stats_mb': s / 1e6, 'in_pod_ms': in_pod_ms,
        'across_ms': across_ms, 'iteration_ms': pass_ms + in_pod_ms + across_ms,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument('--rows', type=float, default=1e10)
    ap.add_argument('--dims', type=int, default=128)
    ap.add_argument('--k', type=int, nargs='+', default=[4096, 65536])
    ap.add_argument('--pods', type=int, nargs='+', default=[4, 16])
    # GB/s per pod: one 100 Gb/s NIC, one 400 Gb/s NIC, 8 × 400 Gb/s (one RDMA NIC per GPU, as HGX pods have)
    ap.add_argument('--net', type=float, nargs='+', default=[12.5, 50.0, 400.0])
    # GB/s the pod's host memory gives DMA reads (a 2-socket DDR5 host: 400-600; an assumption, not measured here)
    ap.add_argument('--host-memory-gbps', type=float, default=400.0)
    a = ap.parse_args()
    print(f'{a.rows:.0e} rows × {a.dims} float32 ({a.rows * a.dims * 4 / 1e12:.1f} TB); measured on one H100: '
          f'{RESIDENT_MS} ms resident and {STREAMED_MS} ms streamed per {MEASURED_ROWS / 1e6:.1f}M rows at k={MEASURED_K}, '
          f'H2D {H2D_GBPS} GB/s; a pod\'s host memory gives {a.host_memory_gbps:g} GB/s to its 8 GPUs\' copies')
    print()
    print('| k | pods (GPUs) | rows per GPU | resident per GPU | host tier per pod | network per pod | pass | '
          'statistics | sum in pod | sum across pods | iteration |')
    print('|---|---|---|---|---|---|---|---|---|---|---|')
    for k in a.k:
        for pods in a.pods:
            for net in a.net:
                r = iteration(a.rows, a.dims, k, pods, net, a.host_memory_gbps)
                print(f"| {k} | {pods} ({r['gpus']}) | {r['rows_per_gpu_m']:.0f}M | {r['resident_m']:.0f}M | "
                      f"{r['host_gb_per_pod']:.0f} GB | {net:g} GB/s | {r['pass_ms']:.0f} ms | {r['stats_mb']:.1f} MB | "
                      f"{r['in_pod_ms']:.2f} ms | {r['across_ms']:.2f} ms | {r['iteration_ms']:.0f} ms |")


if __name__ == '__main__':
    main()
