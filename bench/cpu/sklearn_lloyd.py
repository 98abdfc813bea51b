"""scikit-learn's Lloyd on the benchmark's data, timed as ANCHORS.md does: (long run − short run) / extra iterations.

usage: /usr/bin/python3 bench/cpu/sklearn_lloyd.py DATA.f32 N D INIT.f32 K SHORT LONG [REPEAT]
prints one JSON line: {"msPerIter", "cpuMsPerIter", "shortMs", "longMs", "inertia", "nIterLong"}; with REPEAT > 1 the short and the long
run are each repeated and the fastest of each is used (the build machine is shared: the minimum is the signal).
"""
import json
import sys
import time

import numpy as np
from sklearn.cluster import KMeans

path, n, d, init_path, k, short, long_ = sys.argv[1:8]
repeat = int(sys.argv[8]) if len(sys.argv) > 8 else 1
n, d, k, short, long_ = int(n), int(d), int(k), int(short), int(long_)
X = np.fromfile(path, dtype=np.float32).reshape(n, d)
C = np.fromfile(init_path, dtype=np.float32).reshape(k, d)


def run(iters):
    km = KMeans(n_clusters=k, init=C, n_init=1, max_iter=iters, tol=0.0, algorithm="lloyd")
    t, c = time.perf_counter(), time.process_time()
    km.fit(X)
    return time.perf_counter() - t, time.process_time() - c, km


run(1)  # warm-up: imports, thread pools
t_short = t_long = c_short = c_long = float("inf")
for _ in range(repeat):
    t, c, _ = run(short)
    t_short, c_short = min(t_short, t), min(c_short, c)
    t, c, km = run(long_)
    t_long, c_long = min(t_long, t), min(c_long, c)
print(json.dumps({"msPerIter": (t_long - t_short) * 1000 / (long_ - short),
                  "cpuMsPerIter": (c_long - c_short) * 1000 / (long_ - short), "shortMs": t_short * 1000,
                  "longMs": t_long * 1000, "inertia": float(km.inertia_), "nIterLong": int(km.n_iter_)}))
