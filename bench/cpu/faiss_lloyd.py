"""faiss-cpu's k-means on the benchmark's data, timed like sklearn_lloyd.py: (long run − short run) / extra iterations.

usage: V/bin/python bench/cpu/faiss_lloyd.py DATA.f32 N D INIT.f32 K SHORT LONG [REPEAT]
Every row is used (max_points_per_centroid large: no subsampling), the init is the given centroids, and the
iterations are plain Lloyd steps (assignment through an exact IndexFlatL2 search, then the means).
prints one JSON line: {"msPerIter", "shortMs", "longMs", "cpuMsPerIter", "inertia"}
"""
import json
import sys
import time

import faiss
import numpy as np

path, n, d, init_path, k, short, long_ = sys.argv[1:8]
repeat = int(sys.argv[8]) if len(sys.argv) > 8 else 1
n, d, k, short, long_ = int(n), int(d), int(k), int(short), int(long_)
X = np.fromfile(path, dtype=np.float32).reshape(n, d)
C = np.fromfile(init_path, dtype=np.float32).reshape(k, d)


def run(iters):
    km = faiss.Kmeans(d, k, niter=iters, max_points_per_centroid=1 << 30, min_points_per_centroid=1, verbose=False,
                      seed=1234)
    t, c = time.perf_counter(), time.process_time()
    km.train(X, init_centroids=C)
    return time.perf_counter() - t, time.process_time() - c, km


run(1)  # warm-up
best = {}
for _ in range(repeat):
    for it in (short, long_):
        t, c, km = run(it)
        w, cpu = best.get(it, (float("inf"), float("inf")))
        best[it] = (min(w, t), min(cpu, c))
        if it == long_:
            inertia = float(km.obj[-1]) if len(km.obj) else float("nan")
print(json.dumps({"msPerIter": (best[long_][0] - best[short][0]) * 1000 / (long_ - short),
                  "cpuMsPerIter": (best[long_][1] - best[short][1]) * 1000 / (long_ - short),
                  "shortMs": best[short][0] * 1000, "longMs": best[long_][0] * 1000, "inertia": inertia}))
