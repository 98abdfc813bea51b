"""scikit-learn's KMeans (Lloyd) from given initial centroids, for the engine tests (test/helpers/sklearn.ts).

usage: /usr/bin/python3 sklearn_kmeans.py DIR N D K MAX_ITER METRIC
reads DIR/x.f32 (N×D float32) and DIR/c.f32 (K×D float32); writes DIR/labels.i32, DIR/centers.f64 and prints one
JSON line {"inertia", "nIter", "version"}. The data is given to sklearn as float64 (the float32 values exactly), so
its arithmetic is float64 like the reference. METRIC cosine: rows are L2-normalized first (spherical k-means is
not sklearn's algorithm: its centroids are not renormalized, so only the first assignment is comparable).
"""
import json
import sys

import numpy as np
import sklearn
from sklearn.cluster import KMeans

d_, n, d, k, max_iter, metric = sys.argv[1:7]
n, d, k, max_iter = int(n), int(d), int(k), int(max_iter)
X = np.fromfile(d_ + "/x.f32", dtype=np.float32).reshape(n, d).astype(np.float64)
C = np.fromfile(d_ + "/c.f32", dtype=np.float32).reshape(k, d).astype(np.float64)
if metric == "cosine":
    X /= np.linalg.norm(X, axis=1, keepdims=True)
km = KMeans(n_clusters=k, init=C, n_init=1, max_iter=max_iter, tol=0.0, algorithm="lloyd")
km.fit(X)
km.labels_.astype(np.int32).tofile(d_ + "/labels.i32")
km.cluster_centers_.astype(np.float64).tofile(d_ + "/centers.f64")
print(json.dumps({"inertia": float(km.inertia_), "nIter": int(km.n_iter_), "version": sklearn.__version__}))
