/**
 * The HTTP API (api/server.ts) on a real redis-server and s3rver, with a real BullMQ worker that speaks the job contract
 * (producer-sim-worker.ts: real progress, cancel and results, no engine), so that progress pacing and cancels are under
 * the test's control. The Python example runs against a real `kmfleet api` and the real worker in api-python.test.ts.
 */
import { request } from 'node:http';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import { buildApi, startApi, type ApiServer } from '../../api/server.js';
import { KmfleetClient } from '../../producer/client.js';
import { keyspace } from '../../producer/keys.js';
import { httpCall } from '../helpers/http-call.js';
import { startRedisServer, type RedisServerHandle } from '../helpers/redis-server.js';
import { startS3Server, type S3ServerHandle } from '../helpers/s3-server.js';
import { startSimWorker, type SimWorker } from './producer-sim-worker.js';

const TOKEN = 'test-token-0123456789abcdef';
const SPEC = { dataset: { uri: 's3://data/x.npy', dims: 4 }, k: 3, maxIter: 5, output: 's3://out/runs' };

interface SseEvent {
  event: string;
  data: any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

/** Reads a text/event-stream to its end. */
function readEvents(base: string, path: string, token: string): Promise<{ status: number; type: string; events: SseEvent[] }> {
  return new Promise((resolve, reject) => {
    const req = request(new URL(path, base), { headers: { Authorization: `Bearer ${token}` }, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => {
        const events = text
          .split('\n\n')
          .filter((block) => block.startsWith('event: '))
          .map((block) => {
            const [e, d] = block.split('\n');
            return { event: e.slice('event: '.length), data: JSON.parse(d.slice('data: '.length)) };
          });
        resolve({ status: res.statusCode ?? 0, type: String(res.headers['content-type']), events });
      });
    });
    req.on('error', reject);
    req.end();
  });
}

describe('kmfleet HTTP API over the SDK', () => {
  let redis: RedisServerHandle;
  let s3: S3ServerHandle;
  let client: KmfleetClient;
  let sim: SimWorker | undefined;
  let api: ApiServer;

  beforeAll(async () => {
    [redis, s3] = await Promise.all([startRedisServer(), startS3Server({ buckets: ['data', 'out'] })]);
    client = new KmfleetClient({ connection: redis.url, jobOptions: { attempts: 1 } });
    api = await startApi({ client, port: 0, token: TOKEN, s3: s3.handle, allowedHosts: ['kmfleet-api.internal'] });
  });
  afterAll(async () => {
    await api?.close();
    await sim?.close();
    await client?.close();
    await Promise.all([s3?.stop(), redis?.stop()]);
  });

  const call = (method: string, path: string, opts: Parameters<typeof httpCall>[3] = {}) =>
    httpCall(api.url, method, path, { token: TOKEN, ...opts });

  it('enqueues idempotently by jobId and answers the SDK\'s JobInfo, field for field', async () => {
    const first = await call('POST', '/v1/jobs', { body: { spec: SPEC, jobId: 'api-1' } });
    expect(first.status).toBe(201);
    expect(first.json()).toMatchObject({ id: 'api-1', created: true, sameSpec: true });
    const again = await call('POST', '/v1/jobs', { body: { spec: { ...SPEC, k: 4 }, jobId: 'api-1' } });
    expect(again.status).toBe(200);
    expect(again.json()).toMatchObject({ id: 'api-1', created: false, sameSpec: false });

    const got = await call('GET', '/v1/jobs/api-1');
    expect(got.status).toBe(200);
    // what the API answers is what the SDK returns: a field the schemas lack (or lose) fails here
    expect(got.json()).toEqual(JSON.parse(JSON.stringify(await client.get('api-1'))));
    expect(got.json().spec).toMatchObject({ k: 3, metric: 'l2', output: 's3://out/runs' });
    expect((await call('GET', '/v1/jobs/nope')).status).toBe(404);
  });

  it('names every bad field of a spec, and of the request itself, with 400', async () => {
    const bad = await call('POST', '/v1/jobs', { body: { spec: { dataset: { uri: 'http://x' }, k: 0, output: 's3://out' } } });
    expect(bad.status).toBe(400);
    expect(bad.json().issues.map((i: { path: string }) => i.path)).toEqual(['dataset.uri', 'k']);
    expect(bad.json().error).toMatch(/^invalid job spec \(2 problems\)/);

    const envelope = await call('POST', '/v1/jobs', { body: { spec: SPEC, jobID: 'x', priority: -1 } });
    expect(envelope.status).toBe(400);
    expect(envelope.json().error).toMatch(/invalid request body/);
    expect(envelope.json().issues).toEqual(
      expect.arrayContaining([expect.objectContaining({ path: 'jobID' }), expect.objectContaining({ path: 'priority' })]),
    );
    const badId = await call('POST', '/v1/jobs', { body: { spec: SPEC, jobId: '12345' } });
    expect(badId.status).toBe(400);
    expect(badId.json().error).toMatch(/job id "12345" must be/);
    expect((await call('POST', '/v1/jobs', { rawBody: '{"spec":', contentType: 'application/json' })).status).toBe(400);
    // a browser's cross-site "simple" request (no preflight) is text/plain: never parsed
    expect((await call('POST', '/v1/jobs', { rawBody: JSON.stringify({ spec: SPEC }), contentType: 'text/plain' })).status).toBe(415);
    expect((await call('GET', '/v1/jobs/api-1/wait?timeoutMs=abc')).json().issues[0].path).toBe('timeoutMs');
  });

  it('long-polls: pending while nothing happens, then each newer progress, then the outcome', async () => {
    await call('POST', '/v1/jobs', { body: { spec: { ...SPEC, maxIter: 6 }, jobId: 'api-poll' } });
    const idle = await call('GET', '/v1/jobs/api-poll/wait?timeoutMs=300');
    expect(idle.json()).toMatchObject({ outcome: 'pending', job: { state: 'waiting', progress: null } });

    sim = await startSimWorker(redis.connection, keyspace(), { iterationMs: 150 });
    const seen: number[] = [];
    let after = 0;
    let answer;
    for (let round = 0; round < 100; round++) {
      answer = (await call('GET', `/v1/jobs/api-poll/wait?timeoutMs=20000&progressAfter=${after}`)).json();
      if (answer.outcome !== 'pending') break;
      expect(answer.job.progress.updatedAt).toBeGreaterThan(after);
      after = answer.job.progress.updatedAt;
      seen.push(answer.job.progress.iteration);
    }
    expect(answer.outcome).toBe('completed');
    expect(answer.job.result).toMatchObject({ jobId: 'api-poll', iterations: 6 });
    // each answer brought news: iterations only go up, and several of the 6 were seen on the way
    expect(seen.length).toBeGreaterThanOrEqual(2);
    expect([...seen].sort((a, b) => a - b)).toEqual(seen);
  });

  it('streams progress as server-sent events and ends with the result', async () => {
    await call('POST', '/v1/jobs', { body: { spec: { ...SPEC, maxIter: 5 }, jobId: 'api-sse' } });
    const { status, type, events } = await readEvents(api.url, '/v1/jobs/api-sse/events', TOKEN);
    expect(status).toBe(200);
    expect(type).toMatch(/^text\/event-stream/);
    const progress = events.filter((e) => e.event === 'progress');
    expect(progress.length).toBeGreaterThanOrEqual(2);
    const iterations = progress.map((e) => e.data.progress?.iteration ?? 0);
    expect([...iterations].sort((a, b) => a - b)).toEqual(iterations);
    const last = events.at(-1)!;
    expect(last.event).toBe('completed');
    expect(last.data).toEqual(JSON.parse(JSON.stringify((await client.get('api-sse'))!.result)));
    expect((await readEvents(api.url, '/v1/jobs/none/events', TOKEN)).status).toBe(404);
  });

  it('cancels: a running job stops, its events end with cancelled; a waiting one is removed', async () => {
    await call('POST', '/v1/jobs', { body: { spec: { ...SPEC, maxIter: 400 }, jobId: 'api-cancel' } });
    const stream = readEvents(api.url, '/v1/jobs/api-cancel/events', TOKEN);
    for (let i = 0; i < 200 && (await client.get('api-cancel'))?.state !== 'active'; i++) await new Promise((r) => setTimeout(r, 25));
    const cancel = await call('POST', '/v1/jobs/api-cancel/cancel');
    expect(cancel.json()).toEqual({ id: 'api-cancel', outcome: 'signalled', state: 'active' });
    expect((await stream).events.at(-1)).toEqual({ event: 'cancelled', data: { id: 'api-cancel' } });
    expect((await call('GET', '/v1/jobs/api-cancel/wait')).json().outcome).toBe('cancelled');

    await call('POST', '/v1/jobs', { body: { spec: SPEC, jobId: 'api-later', delayMs: 600_000 } });
    expect((await call('POST', '/v1/jobs/api-later/cancel')).json()).toMatchObject({ outcome: 'removed', state: 'delayed' });
    expect((await call('GET', '/v1/jobs/api-later')).status).toBe(404);
    expect((await call('POST', '/v1/jobs/never/cancel')).json()).toMatchObject({ outcome: 'not-found' });
  });

  it('hands out presigned URLs of a completed job\'s outputs, which plain GETs can read', async () => {
    await call('POST', '/v1/jobs', { body: { spec: { ...SPEC, name: 'api-model' }, jobId: 'api-out' } });
    expect((await call('GET', '/v1/jobs/api-out/wait?timeoutMs=20000')).json().outcome).toBe('completed');
    // the simulated worker writes no files: put some where its result says they are
    await s3.put('out', 'runs/api-out/centroids.npy', Buffer.from('centroid bytes'));
    await s3.put('out', 'runs/api-out/summary.json', Buffer.from('{"ok":true}'));
    const links = await call('GET', '/v1/jobs/api-out/outputs?expiresIn=600');
    expect(links.status).toBe(200);
    const body = links.json();
    expect(body).toMatchObject({ jobId: 'api-out', expiresInSeconds: 600, files: { centroids: { uri: 's3://out/runs/api-out/centroids.npy' } } });
    expect(body.files.centroids.url).toMatch(/X-Amz-Signature=/);
    expect(await (await fetch(body.files.centroids.url)).text()).toBe('centroid bytes');
    expect(await (await fetch(body.files.summary.url)).json()).toEqual({ ok: true });
    // SigV4 query signing with the server's credentials and the asked lifetime (s3rver does not check signatures:
    // that a real S3 refuses a tampered URL is not tested here)
    const signed = new URL(body.files.centroids.url).searchParams;
    expect(signed.get('X-Amz-Expires')).toBe('600');
    expect(signed.get('X-Amz-Credential')).toMatch(/^S3RVER\/\d{8}\/us-east-1\/s3\/aws4_request$/);

    await call('POST', '/v1/jobs', { body: { spec: SPEC, jobId: 'api-unfinished', delayMs: 600_000 } });
    expect((await call('GET', '/v1/jobs/api-unfinished/outputs')).status).toBe(409);
  });

  it('serves model history and schedules', async () => {
    expect((await call('GET', '/v1/models')).json()).toContain('api-model');
    const history = (await call('GET', '/v1/models/api-model/history?limit=5')).json();
    expect(history.map((r: { jobId: string }) => r.jobId)).toEqual(['api-out']);
    expect((await call('GET', '/v1/models/api-model/latest')).json().jobId).toBe('api-out');
    expect((await call('GET', '/v1/models/unknown-model/latest')).status).toBe(404);

    const put = await call('PUT', '/v1/schedules/nightly', { body: { repeat: { cron: '0 3 * * *', tz: 'Europe/Berlin' }, spec: SPEC } });
    expect(put.status).toBe(200);
    expect(put.json()).toMatchObject({ name: 'nightly', cron: '0 3 * * *', tz: 'Europe/Berlin', spec: { init: 'previous', name: 'nightly' } });
    expect((await call('GET', '/v1/schedules')).json().map((s: { name: string }) => s.name)).toEqual(['nightly']);
    const badCron = await call('PUT', '/v1/schedules/bad', { body: { repeat: { cron: 'every day' }, spec: SPEC } });
    expect(badCron.status).toBe(400);
    expect(badCron.json().error).toMatch(/cron/);
    expect((await call('DELETE', '/v1/schedules/nightly')).status).toBe(204);
    expect((await call('DELETE', '/v1/schedules/nightly')).status).toBe(404);
  });

  it('requires the bearer token on every job route, not on /healthz and /openapi.json', async () => {
    const none = await httpCall(api.url, 'GET', '/v1/jobs/api-1');
    expect(none.status).toBe(401);
    expect(none.headers['www-authenticate']).toBe('Bearer');
    expect((await httpCall(api.url, 'GET', '/v1/jobs/api-1', { token: `${TOKEN}x` })).status).toBe(401);
    expect((await httpCall(api.url, 'POST', '/v1/jobs', { body: { spec: SPEC } })).status).toBe(401);
    expect((await httpCall(api.url, 'GET', '/healthz')).json()).toEqual({ status: 'ok', redis: client.where });
    expect((await httpCall(api.url, 'GET', '/openapi.json')).json().openapi).toBe('3.1.0');
  });

  it('serves only loopback names, its address and --allowed-host names in Host: others get 421', async () => {
    const port = new URL(api.url).port;
    for (const host of [`localhost:${port}`, `127.0.0.1:${port}`, `[::1]:${port}`, 'kmfleet-api.internal', 'KMFLEET-API.internal:80']) {
      expect((await call('GET', '/healthz', { host })).status, host).toBe(200);
    }
    for (const host of ['attacker.example', `attacker.example:${port}`, '127.0.0.1.attacker.example', 'localhost.attacker.example']) {
      const r = await call('GET', '/v1/jobs/api-1', { host });
      expect(r.status, host).toBe(421);
      expect(r.json().error).toMatch(/not served here/);
    }
    expect((await call('GET', '/no/such/route', { host: 'attacker.example' })).status).toBe(421);
  });

  it('refuses a non-loopback address without a token; answers 503 while Redis is down', async () => {
    expect(() => buildApi({ client, host: '0.0.0.0' })).toThrow(/refusing to listen on 0\.0\.0\.0 without a token/);
    expect(() => buildApi({ client, host: '::' })).toThrow(/without a token/);
    expect(() => buildApi({ client, host: '0.0.0.0', token: TOKEN })).not.toThrow();

    // a Redis that goes away after the API connected: 503 at once (producers fail fast), then back to normal
    const own = await startRedisServer();
    const ownClient = new KmfleetClient({ connection: own.url });
    const ownApi = await startApi({ client: ownClient, port: 0 });
    try {
      expect((await httpCall(ownApi.url, 'POST', '/v1/jobs', { body: { spec: SPEC, jobId: 'before' } })).status).toBe(201);
      await own.kill('SIGKILL');
      const r = await httpCall(ownApi.url, 'GET', '/v1/jobs/before');
      expect(r.status).toBe(503);
      expect(r.json().error).toMatch(/Redis/);
      expect((await httpCall(ownApi.url, 'GET', '/healthz')).json()).toMatchObject({ status: 'unavailable' });
      await own.restart();
      let status = 0;
      for (let i = 0; i < 200 && status !== 404; i++) {
        status = (await httpCall(ownApi.url, 'GET', '/v1/jobs/before')).status; // no persistence: the job is gone
        if (status !== 404) await new Promise((res) => setTimeout(res, 50));
      }
      expect(status).toBe(404);
    } finally {
      await ownApi.close();
      await ownClient.close();
      await own.stop();
    }
  });
});
