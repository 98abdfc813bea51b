/**
 * The compose stack and the Prometheus configuration, validated statically (no Docker engine in CI): services,
 * pinned images, health checks, volumes, dependencies, and the consistency of the environment with the worker's
 * configuration, the metrics server and the Prometheus scrape jobs.
 */
import { existsSync, readFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { parse } from 'yaml';
import { describe, expect, it } from 'vitest';
import { loadWorkerConfig } from '../../worker/config.js';
import { createFleetMetrics, DEFAULT_METRICS_PORT, HEALTH_PATH } from '../../worker/metrics/index.js';
import { tracingSettingsFromEnv } from '../../cli/tracing.js';
import { envVarsReadByCode } from '../helpers/env-vars.js';

const ROOT = join(import.meta.dirname, '..', '..');
const COMPOSE = join(ROOT, 'infra', 'compose', 'compose.yaml');
const COMPOSE_DIR = dirname(COMPOSE);

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Obj = any;
const load = (file: string): Obj => parse(readFileSync(file, 'utf8'), { merge: true, uniqueKeys: true });

const compose = load(COMPOSE);
const services: Record<string, Obj> = compose.services;
const prom = load(join(ROOT, 'infra', 'prometheus', 'prometheus.yml'));
const rules = load(join(ROOT, 'infra', 'prometheus', 'rules.yml'));

/** Compose's ${VAR:-default} interpolation with an empty environment. */
const interpolate = (v: unknown): string => String(v).replace(/\$\{[A-Z_]+:-([^}]*)\}/g, '$1');

const envOf = (name: string): Record<string, string> => {
  const e = services[name].environment;
  expect(Array.isArray(e), `${name}: use the map form of environment`).toBe(false);
  return Object.fromEntries(Object.entries(e ?? {}).map(([k, v]) => [k, String(v)]));
};

const WORKERS = ['worker', 'worker-gpu'];
const LONG_RUNNING = ['redis', 'minio', 'worker', 'worker-gpu', 'queue-exporter', 'prometheus', 'grafana', 'dashboard'];

/** Every series name the fleet's registry can export (histograms: _bucket, _sum, _count). */
async function exportedSeriesNames(): Promise<Set<string>> {
  const fake = { name: 'q', getJobCounts: async () => ({ waiting: 0, prioritized: 0, delayed: 0, active: 0 }) };
  const m = createFleetMetrics({ queue: fake, defaultMetrics: false });
  const out = new Set<string>();
  for (const x of await m.registry.getMetricsAsJSON()) {
    out.add(x.name);
    if (String(x.type) === 'histogram') for (const s of ['_bucket', '_sum', '_count']) out.add(x.name + s);
  }
  return out;
}

describe('infra/compose/compose.yaml', () => {
  it('is named by its top-level name:, which only Compose v2 reads; docs/operations.md says so, not that v1 works', () => {
    expect(compose.name).toBe('kmfleet');
    const ops = readFileSync(join(ROOT, 'docs', 'operations.md'), 'utf8');
    expect(ops).toMatch(/needs \*\*Docker Compose v2\*\*/);
    expect(ops).toMatch(/docker-compose` v1[\s\S]{0,80}rejects/);
    expect(ops).not.toMatch(/docker-compose config` \(v1/);
  });

  it('has the fleet: Redis, MinIO + bucket creation, workers (CPU and GPU profile), exporter, Prometheus, dashboard', () => {
    expect(Object.keys(services).sort()).toEqual(
      ['dashboard', 'grafana', 'jaeger', 'minio', 'minio-init', 'prometheus', 'queue-exporter', 'redis', 'worker', 'worker-gpu'].sort(),
    );
    expect(services['worker-gpu'].profiles).toEqual(['gpu']);
    expect(services.dashboard.profiles).toBeUndefined(); // `kmfleet dashboard` exists: part of the default stack
    expect(services.grafana.profiles).toEqual(['grafana']);
    expect(services.worker.profiles).toBeUndefined(); // `up` alone starts CPU workers, which run anywhere
    expect(services.jaeger.profiles).toEqual(['tracing']);
  });

  it('tracing: the workers send OTLP/HTTP to the jaeger service only when OTEL_TRACES_EXPORTER=otlp starts the stack', () => {
    const jaegerOtlpHttp = 4318; // the OTLP/HTTP receiver of Jaeger (and of any OpenTelemetry Collector)
    for (const w of WORKERS) {
      const env = envOf(w);
      expect(env.OTEL_EXPORTER_OTLP_ENDPOINT, w).toBe(`http://jaeger:${jaegerOtlpHttp}`);
      expect(env.OTEL_TRACES_EXPORTER, w).toBe('${OTEL_TRACES_EXPORTER:-none}');
      // with compose's default: off, although an endpoint is set; with the variable: OTLP
      expect(tracingSettingsFromEnv({ ...env, OTEL_TRACES_EXPORTER: interpolate(env.OTEL_TRACES_EXPORTER) }), w).toBeUndefined();
      expect(tracingSettingsFromEnv({ ...env, OTEL_TRACES_EXPORTER: 'otlp' }), w).toEqual({ exporters: ['otlp'] });
    }
    // a dependency on a service of an inactive profile would break `up` without --profile tracing
    for (const [name, s] of Object.entries(services)) expect(Object.keys(s.depends_on ?? {}), name).not.toContain('jaeger');
    expect(services.jaeger.ports).toEqual(['127.0.0.1:16686:16686']);
    const ops = readFileSync(join(ROOT, 'docs', 'operations.md'), 'utf8');
    expect(ops).toContain('OTEL_TRACES_EXPORTER=otlp docker compose -f infra/compose/compose.yaml --profile tracing up -d');
  });

  it('pins every pulled image (no latest, no bare name); the kmfleet image is built from the Dockerfile', () => {
    for (const [name, s] of Object.entries(services)) {
      if (s.build) {
        expect(s.image, name).toBe('kmfleet:dev');
        expect(existsSync(resolve(COMPOSE_DIR, s.build.context, s.build.dockerfile)), name).toBe(true);
        continue;
      }
      expect(s.image, name).toMatch(/^[\w./-]+:[\w][\w.-]*$/);
      expect(s.image, name).not.toMatch(/:latest$/);
    }
  });

  it('Redis runs with AOF and noeviction on a volume', () => {
    const cmd = services.redis.command.join(' ');
    expect(cmd).toMatch(/--appendonly yes/);
    expect(cmd).toMatch(/--maxmemory-policy noeviction/);
    expect(services.redis.volumes).toContain('redis-data:/data');
  });

  it('every long-running service has a health check; dependencies wait on health or completion', () => {
    for (const name of LONG_RUNNING) {
      const hc = services[name].healthcheck;
      expect(hc?.test?.[0], name).toBe('CMD');
      expect(hc.interval, name).toMatch(/^\d+s$/);
    }
    for (const [name, s] of Object.entries(services)) {
      for (const [dep, cond] of Object.entries((s.depends_on ?? {}) as Record<string, Obj>)) {
        expect(services[dep], `${name} depends on ${dep}`).toBeDefined();
        if (cond.condition === 'service_healthy') expect(services[dep].healthcheck, `${dep}`).toBeDefined();
        if (cond.condition === 'service_completed_successfully') expect(services[dep].restart, dep).toBe('no');
      }
    }
    for (const w of WORKERS) {
      expect(services[w].depends_on.redis.condition).toBe('service_healthy');
      expect(services[w].depends_on['minio-init'].condition).toBe('service_completed_successfully');
      expect(services[w].healthcheck.test.join(' ')).toContain(`127.0.0.1:${DEFAULT_METRICS_PORT}${HEALTH_PATH}`);
    }
  });

  it('declares every named volume it mounts, and every bind-mounted file exists', () => {
    const declared = new Set(Object.keys(compose.volumes));
    const used = new Set<string>();
    for (const [name, s] of Object.entries(services)) {
      for (const v of (s.volumes ?? []) as string[]) {
        const [src] = v.split(':');
        if (src.startsWith('.') || src.startsWith('/')) {
          expect(existsSync(resolve(COMPOSE_DIR, src)), `${name}: ${src}`).toBe(true);
        } else {
          expect(declared.has(src), `${name}: volume ${src} not declared`).toBe(true);
          used.add(src);
        }
      }
    }
    expect([...declared].sort()).toEqual([...used].sort());
  });

  it('the workers get a valid worker configuration that matches the stack', () => {
    for (const w of WORKERS) {
      const env = envOf(w);
      const c = loadWorkerConfig(env);
      expect(services[c.redis.host], `${w}: REDIS_URL host`).toBeDefined();
      expect(services[c.redis.host].image).toMatch(/^redis:/);
      const s3 = new URL(env.KMFLEET_S3_ENDPOINT);
      expect(services[s3.hostname].image).toMatch(/^minio\/minio:/);
      expect(env.AWS_ACCESS_KEY_ID).toBe(envOf('minio').MINIO_ROOT_USER);
      expect(env.AWS_SECRET_ACCESS_KEY).toBe(envOf('minio').MINIO_ROOT_PASSWORD);
      expect(c.metricsPort).toBe(DEFAULT_METRICS_PORT);
      expect(c.concurrency).toBe(1);
      const cacheMount = (services[w].volumes as string[]).find((v) => v.split(':')[1] === c.cacheDir);
      expect(cacheMount, `${w}: cache volume at ${c.cacheDir}`).toBeDefined();
      // compose waits stop_grace_period before SIGKILL: longer than the worker's own grace
      const stopGrace = Number(/^(\d+)s$/.exec(services[w].stop_grace_period)![1]);
      expect(stopGrace).toBeGreaterThanOrEqual(c.shutdownGraceMs / 1000 + 10);
      expect(services[w].command).toEqual(['worker']);
      expect(interpolate(services[w].deploy.replicas)).toMatch(/^\d+$/);
      expect(services[w].deploy.replicas).toMatch(/^\$\{KMFLEET_(GPU_)?WORKERS:-\d+\}$/);
    }
    // the exporter reads the same queue as the workers
    const ex = loadWorkerConfig(envOf('queue-exporter'));
    const wk = loadWorkerConfig(envOf('worker'));
    expect([ex.prefix, ex.queue, ex.redis.host]).toEqual([wk.prefix, wk.queue, wk.redis.host]);
  });

  it('GPU workers reserve one NVIDIA GPU; CPU workers force the cpu backend and reserve none', () => {
    const dev = services['worker-gpu'].deploy.resources.reservations.devices[0];
    expect(dev).toMatchObject({ driver: 'nvidia', count: 1, capabilities: ['gpu'] });
    expect(services.worker.deploy.resources).toBeUndefined();
    expect(envOf('worker').KMFLEET_BACKEND).toBe('cpu');
    expect(envOf('worker-gpu').KMFLEET_BACKEND).toBeUndefined();
  });

  it('the one-shot creates the bucket with the MinIO credentials and exits', () => {
    const mi = services['minio-init'];
    const script = mi.command.join(' ');
    expect(script).toMatch(/mc alias set local http:\/\/minio:9000/);
    expect(script).toMatch(/mc mb --ignore-existing local\/kmfleet\b/);
    // the only bucket specs may name is the one created here
    const bucket = /local\/([a-z0-9.-]+)/.exec(script)![1];
    for (const w of WORKERS) expect(loadWorkerConfig(envOf(w)).limits.allowedBuckets).toEqual([bucket]);
    expect(envOf('minio-init')).toEqual({
      MINIO_ROOT_USER: envOf('minio').MINIO_ROOT_USER,
      MINIO_ROOT_PASSWORD: envOf('minio').MINIO_ROOT_PASSWORD,
    });
  });

  it('the queue exporter runs the exporter module; ports are published on loopback only', () => {
    const ep = services['queue-exporter'].entrypoint as string[];
    expect(ep.slice(0, 3)).toEqual(['tini', '--', 'node']);
    expect(existsSync(join(ROOT, ep[3].replace(/^dist\//, '').replace(/\.js$/, '.ts')))).toBe(true);
    for (const [name, s] of Object.entries(services)) {
      for (const p of (s.ports ?? []) as string[]) expect(p, name).toMatch(/^127\.0\.0\.1:/);
    }
  });

  it('the dashboard listens on all interfaces inside its container, on the port published on loopback', () => {
    const cmd = services.dashboard.command as string[];
    expect(cmd[0]).toBe('dashboard');
    const port = cmd[cmd.indexOf('--port') + 1];
    expect(cmd[cmd.indexOf('--host') + 1]).toBe('0.0.0.0');
    expect(services.dashboard.ports).toEqual([`127.0.0.1:${port}:${port}`]);
    expect(services.dashboard.healthcheck.test.join(' ')).toContain(`127.0.0.1:${port}/`);
    expect(existsSync(join(ROOT, 'cli', 'commands', 'dashboard.ts'))).toBe(true);
  });

  it('every environment variable given to kmfleet services is one the code reads', () => {
    const read = envVarsReadByCode();
    for (const name of ['worker', 'worker-gpu', 'queue-exporter', 'dashboard']) {
      for (const k of Object.keys(envOf(name))) expect(read.has(k) || /^AWS_/.test(k), `${name}: ${k}`).toBe(true);
    }
  });
});

describe('infra/prometheus', () => {
  it('scrapes every worker replica and the exporter, on the metrics port, by compose service name', () => {
    const jobs = new Map<string, Obj>(prom.scrape_configs.map((j: Obj) => [j.job_name, j]));
    const workers = jobs.get('kmfleet-worker');
    expect(workers.dns_sd_configs[0].type).toBe('A');
    expect(workers.dns_sd_configs[0].port).toBe(DEFAULT_METRICS_PORT);
    expect([...workers.dns_sd_configs[0].names].sort()).toEqual([...WORKERS].sort());
    const ex = jobs.get('kmfleet-queue-exporter');
    for (const t of ex.static_configs[0].targets as string[]) {
      const [host, port] = t.split(':');
      expect(services[host], t).toBeDefined();
      expect(Number(port)).toBe(DEFAULT_METRICS_PORT);
    }
    for (const j of jobs.values()) expect(j.metrics_path).toBe('/metrics');
  });

  it('the rule files are mounted where prometheus.yml loads them', () => {
    const mounts = (services.prometheus.volumes as string[]).map((v) => v.split(':')[1]);
    for (const f of prom.rule_files as string[]) expect(mounts).toContain(f);
    expect(services.prometheus.command).toContain('--config.file=/etc/prometheus/prometheus.yml');
    expect(mounts).toContain('/etc/prometheus/prometheus.yml');
  });

  it('Grafana is provisioned with the stack Prometheus and the kmfleet dashboard', () => {
    const ds = load(join(ROOT, 'infra', 'grafana', 'provisioning', 'datasources', 'prometheus.yml'));
    const url = new URL(ds.datasources[0].url);
    expect(services[url.hostname].image).toMatch(/^prom\/prometheus:/);
    expect(Number(url.port)).toBe(9090);
    const prov = load(join(ROOT, 'infra', 'grafana', 'provisioning', 'dashboards', 'kmfleet.yml'));
    const mounts = (services.grafana.volumes as string[]).map((v) => v.split(':'));
    const dashMount = mounts.find(([src]) => src.endsWith('kmfleet-dashboard.json'))!;
    expect(dashMount[1].startsWith(prov.providers[0].options.path + '/')).toBe(true);
    expect(mounts.find(([src]) => src.endsWith('provisioning'))![1]).toBe('/etc/grafana/provisioning');
  });

  it('alert rules use only metrics the fleet exports', async () => {
    const exported = await exportedSeriesNames();
    expect(exported.has('kmfleet_queue_pending')).toBe(true);
    let count = 0;
    for (const g of rules.groups) {
      for (const r of g.rules) {
        expect(r.alert).toMatch(/^Kmfleet\w+$/);
        expect(r.annotations.summary).toBeTruthy();
        for (const name of (r.expr as string).match(/\bkmfleet_\w+/g) ?? []) expect(exported, `${r.alert}: ${name}`).toContain(name);
        count++;
      }
    }
    expect(count).toBeGreaterThan(0);
  });
});

describe('infra/grafana/kmfleet-dashboard.json', () => {
  const dash = JSON.parse(readFileSync(join(ROOT, 'infra', 'grafana', 'kmfleet-dashboard.json'), 'utf8'));

  it('is a dashboard with unique panel ids, non-overlapping on a 24-column grid, each with a query', () => {
    expect(dash.uid).toBe('kmfleet');
    const ids = dash.panels.map((p: Obj) => p.id);
    expect(new Set(ids).size).toBe(ids.length);
    const cells = new Set<string>();
    for (const p of dash.panels) {
      const g = p.gridPos;
      expect(g.x + g.w, p.title).toBeLessThanOrEqual(24);
      for (let x = g.x; x < g.x + g.w; x++) {
        for (let y = g.y; y < g.y + g.h; y++) {
          expect(cells.has(`${x},${y}`), `${p.title} overlaps`).toBe(false);
          cells.add(`${x},${y}`);
        }
      }
      expect(p.targets.length, p.title).toBeGreaterThan(0);
      expect(p.datasource.uid).toBe('${datasource}');
    }
  });

  it('queries only metrics the fleet exports, with balanced parentheses and braces', async () => {
    const exported = await exportedSeriesNames();
    let n = 0;
    for (const p of dash.panels) {
      for (const t of p.targets) {
        const expr = t.expr as string;
        for (const name of expr.match(/\bkmfleet_\w+/g) ?? []) expect(exported, `${p.title}: ${name}`).toContain(name);
        for (const [o, c] of [['(', ')'], ['{', '}'], ['[', ']']]) {
          expect(expr.split(o).length, `${p.title}: ${expr}`).toBe(expr.split(c).length);
        }
        n++;
      }
    }
    expect(n).toBeGreaterThan(10);
  });
});
