#!/usr/bin/env python3
"""Cluster a dataset on a kmfleet fleet from Python, through its HTTP API (`kmfleet api`).

Standard library and numpy only: no Node, no Redis client, no S3 SDK on this side.

  export KMFLEET_API_TOKEN=...            # the token the API server was started with (if any)
  python3 kmfleet_example.py --api http://127.0.0.1:8090 \
      --dataset s3://bucket/embeddings.npy --k 64 --output s3://bucket/runs --out ./result

It enqueues a job (POST /v1/jobs), follows its progress as server-sent events (GET /v1/jobs/{id}/events; with
--long-poll: GET /v1/jobs/{id}/wait), then asks for presigned URLs of the outputs (GET /v1/jobs/{id}/outputs) and
loads centroids.npy and assignments.npy with numpy straight from S3. With --out it saves them there.

The dataset must already be in S3: a .npy of float32 or float16 rows (N x D, C order). numpy's default float64 is
accepted with --convert-f64 (the spec's dataset.convert = "f64-to-f32"). Exit status: 0 done, 1 the job failed or
was cancelled, 2 the API refused the request (the message names every bad field), 3 the API could not be reached.
The last line on stdout is a JSON summary.
"""
import argparse
import io
import json
import os
import sys
import urllib.error
import urllib.parse
import urllib.request

import numpy as np


class ApiError(Exception):
    """An answer of the API other than 2xx: its status, message and (for a bad spec) every bad field."""

    def __init__(self, status, error, issues=None):
        super().__init__(f"HTTP {status}: {error}")
        self.status = status
        self.error = error
        self.issues = issues or []


class KmfleetApi:
    """A small client of the kmfleet HTTP API (api/openapi.json describes every route)."""

    def __init__(self, base_url, token=None, timeout_s=70):
        self.base = base_url.rstrip("/")
        self.token = token
        self.timeout_s = timeout_s

    def _open(self, method, path, body=None, accept="application/json"):
        data = None if body is None else json.dumps(body).encode("utf-8")
        req = urllib.request.Request(self.base + path, data=data, method=method)
        req.add_header("Accept", accept)
        if data is not None:
            req.add_header("Content-Type", "application/json")
        if self.token:
            req.add_header("Authorization", f"Bearer {self.token}")
        try:
            return urllib.request.urlopen(req, timeout=self.timeout_s)
        except urllib.error.HTTPError as err:
            try:
                answer = json.loads(err.read().decode("utf-8"))
            except ValueError:
                answer = {"error": err.reason}
            raise ApiError(err.code, answer.get("error", ""), answer.get("issues")) from None

    def _json(self, method, path, body=None):
        with self._open(method, path, body) as resp:
            return json.loads(resp.read().decode("utf-8")) if resp.status != 204 else None

    @staticmethod
    def _id(job_id):
        return urllib.parse.quote(job_id, safe="")

    def enqueue(self, spec, job_id=None, priority=None):
        body = {"spec": spec}
        if job_id:
            body["jobId"] = job_id
        if priority:
            body["priority"] = priority
        return self._json("POST", "/v1/jobs", body)

    def job(self, job_id):
        return self._json("GET", f"/v1/jobs/{self._id(job_id)}")

    def cancel(self, job_id):
        return self._json("POST", f"/v1/jobs/{self._id(job_id)}/cancel")

    def outputs(self, job_id, expires_in=3600):
        return self._json("GET", f"/v1/jobs/{self._id(job_id)}/outputs?expiresIn={expires_in}")

    def events(self, job_id):
        """Yields (event, data) from the job's server-sent events until the server ends the stream."""
        with self._open("GET", f"/v1/jobs/{self._id(job_id)}/events", accept="text/event-stream") as resp:
            event, data = None, []
            for raw in resp:
                line = raw.decode("utf-8").rstrip("\r\n")
                if line == "":
                    if event is not None:
                        yield event, json.loads("\n".join(data))
                    event, data = None, []
                elif line.startswith(":"):
                    continue  # a heartbeat comment
                elif line.startswith("event:"):
                    event = line[len("event:"):].strip()
                elif line.startswith("data:"):
                    data.append(line[len("data:"):].strip())

    def wait_long_poll(self, job_id, on_progress, timeout_ms=25000):
        """Asks again until the job ends; on_progress gets each newer progress report. Returns the last WaitResult."""
        after = 0
        while True:
            answer = self._json("GET", f"/v1/jobs/{self._id(job_id)}/wait?timeoutMs={timeout_ms}&progressAfter={after}")
            job = answer["job"]
            progress = job and job["progress"]
            if progress and progress["updatedAt"] > after:
                after = progress["updatedAt"]
                on_progress(job["state"], progress)
            if answer["outcome"] != "pending":
                return answer


def load_npy(url):
    """A .npy from a presigned URL, into memory (no pickles: outputs are plain arrays)."""
    with urllib.request.urlopen(url, timeout=300) as resp:
        return np.load(io.BytesIO(resp.read()), allow_pickle=False)


def show_progress(state, progress):
    if progress is None:
        print(f"  {state}", file=sys.stderr)
        return
    inertia = progress["inertia"]
    print(
        f"  {progress['phase']:<12} iteration {progress['iteration']}/{progress['maxIter']}"
        + (f"  inertia {inertia:.6g}" if inertia is not None else ""),
        file=sys.stderr,
    )


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--api", default=os.environ.get("KMFLEET_API_URL", "http://127.0.0.1:8090"))
    ap.add_argument("--dataset", required=True, help="s3://bucket/key.npy")
    ap.add_argument("--k", type=int, required=True)
    ap.add_argument("--output", required=True, help="s3://bucket[/prefix]: outputs go under <output>/<jobId>/")
    ap.add_argument("--max-iter", type=int)
    ap.add_argument("--seed", type=int)
    ap.add_argument("--name", help="model name (result history, warm starts)")
    ap.add_argument("--convert-f64", action="store_true", help="accept a float64 .npy (rounded to float32 as it is read)")
    ap.add_argument("--job-id", help="idempotency key (default: the server picks one)")
    ap.add_argument("--long-poll", action="store_true", help="follow with long-polling instead of server-sent events")
    ap.add_argument("--out", help="save centroids.npy and assignments.npy in this directory")
    args = ap.parse_args(argv)

    api = KmfleetApi(args.api, token=os.environ.get("KMFLEET_API_TOKEN"))
    spec = {"dataset": {"uri": args.dataset}, "k": args.k, "output": args.output}
    if args.convert_f64:
        spec["dataset"]["convert"] = "f64-to-f32"
    for key, value in (("maxIter", args.max_iter), ("seed", args.seed), ("name", args.name)):
        if value is not None:
            spec[key] = value

    try:
        handle = api.enqueue(spec, job_id=args.job_id)
        job_id = handle["id"]
        print(f"job {job_id} {'enqueued' if handle['created'] else 'already existed'}", file=sys.stderr)

        reports = []

        def on_progress(state, progress):
            reports.append(progress)
            show_progress(state, progress)

        if args.long_poll:
            final = api.wait_long_poll(job_id, on_progress)
            outcome, result = final["outcome"], (final["job"] or {}).get("result")
            reason = (final["job"] or {}).get("failedReason")
        else:
            outcome, result, reason = None, None, None
            for event, data in api.events(job_id):
                if event == "progress":
                    on_progress(data["state"], data["progress"])
                elif event == "completed":
                    outcome, result = "completed", data
                elif event in ("failed", "cancelled", "error"):
                    outcome, reason = event, data.get("reason") or data.get("error")
        if outcome != "completed":
            print(f"job {job_id} {outcome}: {reason or ''}".rstrip(": "), file=sys.stderr)
            return 1

        links = api.outputs(job_id)["files"]
        centroids = load_npy(links["centroids"]["url"])
        assignments = load_npy(links["assignments"]["url"])
    except ApiError as err:
        print(f"kmfleet API: {err}", file=sys.stderr)
        for issue in err.issues:
            print(f"  {issue['path']}: {issue['message']}", file=sys.stderr)
        return 2 if 400 <= err.status < 500 else 1
    except urllib.error.URLError as err:
        print(f"kmfleet API at {args.api} cannot be reached: {err.reason}", file=sys.stderr)
        return 3

    print(
        f"done: {result['iterations']} iterations, inertia {result['inertia']:.6g}, "
        f"centroids {centroids.shape} {centroids.dtype}, assignments {assignments.shape} {assignments.dtype}, "
        f"cluster sizes {np.bincount(assignments, minlength=centroids.shape[0]).tolist()}",
        file=sys.stderr,
    )
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        np.save(os.path.join(args.out, "centroids.npy"), centroids)
        np.save(os.path.join(args.out, "assignments.npy"), assignments)
    print(json.dumps({
        "jobId": job_id,
        "iterations": result["iterations"],
        "inertia": result["inertia"],
        "centroids": list(centroids.shape),
        "assignments": list(assignments.shape),
        "progressReports": len(reports),
        "lastIteration": max((p["iteration"] for p in reports if p), default=0),
    }))
    return 0


if __name__ == "__main__":
    sys.exit(main())
