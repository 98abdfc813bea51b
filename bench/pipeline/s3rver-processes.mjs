/**
 * s3rver for the benches, in processes of its own (a remote S3 would not share the worker's event loop or cores).
 *
 * `processes` > 1 runs that many s3rver instances on one port through node:cluster, over one directory: a request
 * goes to whichever process accepts its connection. s3rver answers every request on one JS thread, a ceiling that AWS
 * S3 and MinIO, serving each connection on its own, do not have; several processes let a bench tell the pipeline's
 * own cost from it (download.mjs measures the difference). Objects are plain files, so an object written through one process is read
 * through another as soon as its PUT is answered.
 */
import { spawn } from 'node:child_process';

/**
 * @param {string} dir s3rver's directory
 * @param {{ processes?: number, buckets?: string[] }} [options]
 * @returns {Promise<{ url: string, pids: () => number[], stop: () => Promise<void> }>}
 */
export async function startS3rverProcesses(dir, { processes = 1, buckets = ['bench'] } = {}) {
  const p = spawn(process.execPath, [new URL('./s3rver-server.cjs', import.meta.url).pathname, dir, String(processes), buckets.join(',')], { stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  p.stdout.on('data', (d) => (out += d));
  p.stderr.on('data', (d) => (out += d));
  const exited = new Promise((r) => p.once('exit', r));
  process.once('exit', () => p.kill('SIGKILL'));
  for (let i = 0; i < 400 && !/PORT \d+ PIDS/.test(out); i++) await new Promise((r) => setTimeout(r, 25));
  const m = /PORT (\d+) PIDS ([\d,]+)/.exec(out);
  if (!m) throw new Error(`s3rver did not start: ${out}`);
  const pids = m[2].split(',').map(Number);
  return {
    url: `http://127.0.0.1:${m[1]}`,
    // the processes that serve requests (the cluster's primary only hands out connections)
    pids: () => pids,
    stop: async () => { p.kill('SIGTERM'); await exited; },
  };
}
