/**
 * One s3rver, or several on one port (node:cluster), for the benches: see s3rver-processes.mjs.
 *   node bench/pipeline/s3rver-server.cjs DIR PROCESSES BUCKET[,BUCKET...]
 * Prints "PORT <port> PIDS <pid,...>" (the processes that serve requests) once every one listens.
 */
const cluster = require('node:cluster');
const [dir, processes = '1', buckets = 'bench'] = process.argv.slice(2);
const n = Math.max(1, Number(processes));

if (n > 1 && cluster.isPrimary) {
  let ready = 0;
  let port;
  for (let i = 0; i < n; i++) {
    cluster.fork().on('message', (m) => {
      port = m.port;
      if (++ready === n) {
        const pids = Object.values(cluster.workers).map((w) => w.process.pid);
        process.stdout.write(`PORT ${port} PIDS ${pids.join(',')}\n`);
      }
    });
  }
  process.on('SIGTERM', () => {
    for (const w of Object.values(cluster.workers)) w.process.kill('SIGTERM');
    process.exit(0);
  });
} else {
  const S3rver = require('s3rver');
  const s = new S3rver({
    port: 0, // in a cluster, every worker's listen(0) gets the same port from the primary
    address: '127.0.0.1',
    silent: true,
    directory: dir,
    configureBuckets: buckets.split(',').map((name) => ({ name })),
  });
  s.run().then((addr) => {
    if (cluster.isWorker) process.send({ port: addr.port });
    else process.stdout.write(`PORT ${addr.port} PIDS ${process.pid}\n`);
  });
  process.on('SIGTERM', () => {
    if (s.httpServer) s.httpServer.closeAllConnections();
    s.close().then(() => process.exit(0));
  });
}
