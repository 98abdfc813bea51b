#!/usr/bin/env python3
# Would bound-based pruning (Hamerly / Yinyang) skip rows on the benchmark's random normal data? A Lloyd run (numpy
# on the CPU; fp32 products, fp64 norms) that counts, per iteration, the rows Hamerly's test (d(x, c_old label) <
# l − max drift) would skip and the share of Yinyang groups (K/64 groups of 64 centroids) rows would still search.
#   python3 bench/gpu/bound_pruning_sim.py N D K      (e.g. 65536 256 256: ~5 minutes on a build machine)
import numpy as np, sys
rng=np.random.default_rng(1)
N,D,K=int(sys.argv[1]),int(sys.argv[2]),int(sys.argv[3])
X=rng.standard_normal((N,D)).astype(np.float32)
C=X[rng.choice(N,K,replace=False)].copy()
xx=(X.astype(np.float64)**2).sum(1)
def dists(C):
    d=xx[:,None]-2*(X@C.T).astype(np.float64)+(C.astype(np.float64)**2).sum(1)[None,:]
    return np.sqrt(np.maximum(d,0))
prev=None
G=max(1,K//64)  # yinyang groups
for it in range(16):
    d=dists(C)
    a=np.argmin(d,1)
    part=np.partition(d,1,axis=1)
    best,second=part[:,0],part[:,1]
    if prev is not None:
        pa,u,l,lg,grp=prev
        da=delta[a]
        # hamerly: u+delta[pa] < l - dmax (with tightened u exact: d to old label)
        uex=d[np.arange(N),pa]
        sk_h=(uex < l-dmax)
        # yinyang group filter: per group lower bound minus group max drift
        gl=lg-gmax[None,:]
        sk_y=(uex < gl.min(1))
        # rows needing full search only for non-skipped groups: fraction of groups to search
        need=(uex[:,None] >= gl)
        frac_groups=need.mean()
        ch=(a!=pa).mean()
        print(f"it {it}: changed {ch:.4f} hamerly_skip {sk_h.mean():.3f} yinyang_rowskip {sk_y.mean():.3f} yinyang_groups_searched {frac_groups:.3f} dmax {dmax:.4f} dmean {delta.mean():.4f} gap_med {np.median(second-best):.4f}")
    # group lower bounds: min dist in each group excluding assigned
    grp=np.arange(K)%G
    dd=d.copy(); dd[np.arange(N),a]=np.inf
    lg=np.stack([dd[:,grp==g].min(1) for g in range(G)],1)
    prev=(a,best,second,lg,grp)
    # update
    Cn=np.zeros((K,D)); np.add.at(Cn,a,X); cnt=np.bincount(a,minlength=K)
    Cn=np.where(cnt[:,None]>0,Cn/np.maximum(cnt,1)[:,None],C).astype(np.float32)
    delta=np.sqrt(((Cn.astype(np.float64)-C)**2).sum(1)); dmax=delta.max()
    gmax=np.array([delta[grp==g].max() for g in range(G)])
    C=Cn
