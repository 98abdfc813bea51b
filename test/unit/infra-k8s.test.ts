/**
 * The Kubernetes manifests, validated offline (no cluster runs in CI):
 *  - every core/apps/policy object against Kubernetes' schemas (kubernetes-models@4: model.validate()),
 *    plus a field-name check that catches typos the schemas let through (unknown fields are not rejected there);
 *  - the CRDs (KEDA ScaledObject, ServiceMonitor) by hand, their required fields and our choices;
 *  - cross-references: kustomization ↔ files, ConfigMap/Secret/ServiceAccount names and keys, selectors,
 *    named ports, probe paths and port ↔ the metrics server, uid ↔ the Dockerfile, grace ↔ the worker,
 *    ConfigMap keys ↔ environment variables the code reads.
 */
import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { ConfigMap, Namespace, Secret, Service, ServiceAccount } from 'kubernetes-models/v1';
import { Deployment, StatefulSet } from 'kubernetes-models/apps/v1';
import { PodDisruptionBudget } from 'kubernetes-models/policy/v1';
import { HorizontalPodAutoscaler } from 'kubernetes-models/autoscaling/v2';
import { NetworkPolicy } from 'kubernetes-models/networking.k8s.io/v1';
import { DEFAULT_METRICS_PORT, HEALTH_PATH, METRICS_PATH, READY_PATH } from '../../worker/metrics/index.js';
import { loadWorkerConfig } from '../../worker/config.js';
import { envVarsReadByCode } from '../helpers/env-vars.js';

const ROOT = join(import.meta.dirname, '..', '..');
const K8S = join(ROOT, 'infra', 'k8s');

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Obj = any;
interface Doc {
  file: string;
  obj: Obj;
}

function loadYaml(file: string): Obj[] {
  const docs = parseAllDocuments(readFileSync(file, 'utf8'), { uniqueKeys: true });
  const list = Array.isArray(docs) ? docs : [docs];
  return list.map((d) => {
    if (d.errors.length) throw new Error(`${file}: ${d.errors.map((e) => e.message).join('; ')}`);
    if (d.warnings.length) throw new Error(`${file}: ${d.warnings.map((e) => e.message).join('; ')}`);
    return d.toJS();
  });
}

const kustomization = loadYaml(join(K8S, 'kustomization.yaml'))[0];
const files = readdirSync(K8S).filter((f) => f.endsWith('.yaml'));
const resources: Doc[] = (kustomization.resources as string[]).flatMap((f) =>
  loadYaml(join(K8S, f)).map((obj) => ({ file: f, obj })),
);
const secretExample = loadYaml(join(K8S, 'secret.example.yaml'))[0];
const all: Doc[] = [...resources, { file: 'secret.example.yaml', obj: secretExample }];

const find = (kind: string, name: string): Obj | undefined =>
  all.find((d) => d.obj.kind === kind && d.obj.metadata?.name === name)?.obj;
const get = (kind: string, name: string): Obj => {
  const o = find(kind, name);
  if (!o) throw new Error(`no ${kind} ${name} in infra/k8s`);
  return o;
};
const worker = get('Deployment', 'kmfleet-worker');
const workerPod = worker.spec.template.spec;
const workerContainer = workerPod.containers.find((c: Obj) => c.name === 'worker');
const config = get('ConfigMap', 'kmfleet-worker-config');
const exporter = get('Deployment', 'kmfleet-queue-exporter');
const scaled = get('ScaledObject', 'kmfleet-worker');
const redis = get('StatefulSet', 'kmfleet-redis');

/** The environment a worker container gets: the ConfigMap, plus the Secret example's keys it references. */
function podEnv(): Record<string, string> {
  const env: Record<string, string> = { ...config.data };
  for (const e of workerContainer.env) {
    if (e.value !== undefined) env[e.name] = e.value;
    const ref = e.valueFrom?.secretKeyRef;
    if (ref) env[e.name] = secretExample.stringData[ref.key];
  }
  return env;
}

const MODELS: Record<string, new (data: Obj) => { validate(): void }> = {
  'v1/Namespace': Namespace,
  'v1/ServiceAccount': ServiceAccount,
  'v1/ConfigMap': ConfigMap,
  'v1/Secret': Secret,
  'v1/Service': Service,
  'apps/v1/Deployment': Deployment,
  'apps/v1/StatefulSet': StatefulSet,
  'policy/v1/PodDisruptionBudget': PodDisruptionBudget,
  'networking.k8s.io/v1/NetworkPolicy': NetworkPolicy,
};
const CRDS = new Set(['keda.sh/v1alpha1/ScaledObject', 'monitoring.coreos.com/v1/ServiceMonitor', 'monitoring.coreos.com/v1/PrometheusRule']);

/** Every property name the bundled Kubernetes schemas know (read from the compiled validators). */
function knownFieldNames(): Set<string> {
  const names = new Set<string>();
  const dirs = [
    join(ROOT, 'node_modules', 'kubernetes-models', '_schemas'),
    join(ROOT, 'node_modules', '@kubernetes-models', 'apimachinery', '_schemas'),
  ];
  for (const dir of dirs) {
    for (const f of readdirSync(dir).filter((x) => x.endsWith('.mjs'))) {
      const src = readFileSync(join(dir, f), 'utf8');
      for (const m of src.matchAll(/data\.([A-Za-z_$][\w$]*)/g)) names.add(m[1]);
      for (const m of src.matchAll(/data\["([^"]+)"\]/g)) names.add(m[1]);
      for (const m of src.matchAll(/missingProperty:"([^"]+)"/g)) names.add(m[1]);
    }
  }
  return names;
}
/** Maps whose keys are user data, not schema fields. */
const FREE_FORM = new Set(['labels', 'annotations', 'matchLabels', 'nodeSelector', 'data', 'stringData', 'binaryData', 'requests', 'limits']);
function unknownFields(obj: Obj, known: Set<string>, path = ''): string[] {
  if (Array.isArray(obj)) return obj.flatMap((v, i) => unknownFields(v, known, `${path}[${i}]`));
  if (obj === null || typeof obj !== 'object') return [];
  const out: string[] = [];
  for (const [k, v] of Object.entries(obj)) {
    if (!known.has(k)) out.push(`${path}.${k}`);
    // a Service's selector is a plain label map; a workload's is a LabelSelector (matchLabels…), checked
    const plainSelector = k === 'selector' && v && typeof v === 'object' && !('matchLabels' in v) && !('matchExpressions' in v);
    if (!FREE_FORM.has(k) && !plainSelector) out.push(...unknownFields(v, known, `${path}.${k}`));
  }
  return out;
}

const podSpecs = (): Array<{ name: string; labels: Obj; spec: Obj }> =>
  resources
    .filter((d) => d.obj.kind === 'Deployment' || d.obj.kind === 'StatefulSet')
    .map((d) => ({ name: d.obj.metadata.name, labels: d.obj.spec.template.metadata.labels, spec: d.obj.spec.template.spec }));
const selects = (selector: Obj, labels: Obj) => Object.entries(selector).every(([k, v]) => labels?.[k] === v);

describe('infra/k8s manifests', () => {
  it('kustomization lists every manifest (except the secret example) and each exists', () => {
    const listed = new Set<string>(kustomization.resources);
    expect(listed.size).toBe(kustomization.resources.length);
    const expected = files.filter((f) => f !== 'kustomization.yaml' && f !== 'secret.example.yaml');
    expect([...listed].sort()).toEqual(expected.sort());
    expect(listed.has('secret.example.yaml')).toBe(false); // secrets never come from git
    expect(kustomization.namespace).toBe('kmfleet');
  });

  it('every core/apps/policy object validates against the Kubernetes schema', () => {
    let validated = 0;
    for (const { file, obj } of all) {
      const key = `${obj.apiVersion}/${obj.kind}`;
      if (CRDS.has(key)) continue;
      const Model = MODELS[key];
      expect(Model, `${file}: no schema for ${key}`).toBeDefined();
      expect(() => new Model(obj).validate(), `${file}: ${obj.kind} ${obj.metadata?.name}`).not.toThrow();
      validated++;
    }
    expect(validated).toBeGreaterThanOrEqual(12);
  });

  it('the validation catches a broken object (the check can fail)', () => {
    const broken = structuredClone(worker);
    broken.spec.template.spec.containers[0].ports[0].containerPort = 'metrics';
    expect(() => new Deployment(broken).validate()).toThrow(/containerPort/);
    const noSelector = structuredClone(get('PodDisruptionBudget', 'kmfleet-worker'));
    noSelector.spec.maxUnavailable = { nope: 1 };
    expect(() => new PodDisruptionBudget(noSelector).validate()).toThrow();
  });

  it('no field name outside the Kubernetes schemas (typos the schemas let through)', () => {
    const known = knownFieldNames();
    expect(known.has('terminationGracePeriodSeconds')).toBe(true);
    expect(unknownFields({ spec: { terminationGracePeriodSecond: 1 } }, known)).toEqual(['.spec.terminationGracePeriodSecond']);
    for (const { file, obj } of all) {
      if (CRDS.has(`${obj.apiVersion}/${obj.kind}`)) continue;
      expect(unknownFields(obj, known), `${file}: ${JSON.stringify(unknownFields(obj, known))}`).toEqual([]);
    }
  });

  it('the PrometheusRule carries exactly the alert groups of infra/prometheus/rules.yml', () => {
    const rule = get('PrometheusRule', 'kmfleet');
    expect(Object.keys(rule.spec)).toEqual(['groups']);
    const fromFile = loadYaml(join(ROOT, 'infra', 'prometheus', 'rules.yml'))[0];
    expect(rule.spec).toEqual(fromFile);
    expect(rule.metadata.labels.release).toBe(get('ServiceMonitor', 'kmfleet').metadata.labels.release);
  });

  it('every image is pinned to a tag (never latest) or a digest', () => {
    const images = podSpecs().flatMap((p) => p.spec.containers.map((c: Obj) => c.image as string));
    expect(images.length).toBeGreaterThan(0);
    for (const img of images) {
      expect(img).toMatch(/(:[\w][\w.-]*|@sha256:[0-9a-f]{64})$/);
      expect(img).not.toMatch(/:latest$/);
    }
    for (const i of kustomization.images) expect(i.newTag ?? i.digest).toBeTruthy();
    for (const i of kustomization.images) expect(i.newTag).not.toBe('latest');
  });

  it('CRDs carry their required fields: ScaledObject and ServiceMonitor', () => {
    expect(scaled.apiVersion).toBe('keda.sh/v1alpha1');
    expect(scaled.spec.scaleTargetRef.name).toBe('kmfleet-worker');
    expect(scaled.spec.triggers.length).toBeGreaterThan(0);
    for (const t of scaled.spec.triggers) {
      expect(typeof t.type).toBe('string');
      for (const v of Object.values(t.metadata)) expect(typeof v).toBe('string'); // KEDA metadata is strings only
    }
    // field names from the KEDA 2.x ScaledObject and Prometheus-scaler documentation: a typo is not ignored silently
    const keys = (o: Obj) => Object.keys(o ?? {});
    const SO_SPEC = ['scaleTargetRef', 'pollingInterval', 'cooldownPeriod', 'initialCooldownPeriod', 'idleReplicaCount', 'minReplicaCount', 'maxReplicaCount', 'fallback', 'advanced', 'triggers'];
    const PROM_META = ['serverAddress', 'query', 'threshold', 'activationThreshold', 'namespace', 'customHeaders', 'ignoreNullValues', 'queryParameters', 'unsafeSsl', 'timeout'];
    for (const k of keys(scaled.spec)) expect(SO_SPEC, `ScaledObject spec.${k}`).toContain(k);
    for (const k of keys(scaled.spec.scaleTargetRef)) expect(['apiVersion', 'kind', 'name', 'envSourceContainerName'], k).toContain(k);
    for (const k of keys(scaled.spec.fallback)) expect(['failureThreshold', 'replicas', 'behavior'], k).toContain(k);
    for (const k of keys(scaled.spec.advanced)) expect(['horizontalPodAutoscalerConfig', 'restoreToOriginalReplicaCount', 'scalingModifiers'], k).toContain(k);
    for (const t of scaled.spec.triggers) {
      for (const k of keys(t)) expect(['type', 'name', 'metadata', 'metricType', 'useCachedMetrics', 'authenticationRef'], k).toContain(k);
      if (t.type === 'prometheus') {
        for (const k of keys(t.metadata)) expect(PROM_META, `prometheus trigger ${k}`).toContain(k);
        for (const k of ['serverAddress', 'query', 'threshold']) expect(t.metadata[k], k).toBeTruthy();
      }
    }
    // the HPA behavior block is a real autoscaling/v2 HorizontalPodAutoscalerBehavior
    const behavior = scaled.spec.advanced.horizontalPodAutoscalerConfig.behavior;
    expect(() =>
      new HorizontalPodAutoscaler({
        metadata: { name: 'x' },
        spec: { scaleTargetRef: { kind: 'Deployment', name: 'x' }, maxReplicas: 1, behavior },
      }).validate(),
    ).not.toThrow();
    expect(unknownFields(behavior, knownFieldNames())).toEqual([]);

    const sm = get('ServiceMonitor', 'kmfleet');
    expect(sm.apiVersion).toBe('monitoring.coreos.com/v1');
    for (const k of keys(sm.spec)) expect(['selector', 'namespaceSelector', 'endpoints', 'jobLabel', 'targetLabels', 'podTargetLabels', 'sampleLimit'], k).toContain(k);
    expect(sm.spec.selector.matchLabels).toBeDefined();
    expect(sm.spec.endpoints.length).toBeGreaterThan(0);
    for (const e of sm.spec.endpoints) {
      for (const k of keys(e)) expect(['port', 'targetPort', 'path', 'scheme', 'interval', 'scrapeTimeout', 'honorLabels', 'relabelings', 'metricRelabelings', 'tlsConfig', 'params'], k).toContain(k);
      expect(e.port).toBe('metrics');
      expect(e.path).toBe(METRICS_PATH);
      expect(e.interval).toMatch(/^\d+s$/);
    }
  });
});

describe('the worker Deployment', () => {
  it('asks for one whole GPU, on GPU nodes, tolerating the GPU taint', () => {
    expect(workerContainer.resources.limits['nvidia.com/gpu']).toBe(1);
    expect(Object.keys(workerPod.nodeSelector).length).toBeGreaterThan(0);
    expect(workerPod.tolerations.some((t: Obj) => t.key === 'nvidia.com/gpu' && t.effect === 'NoSchedule')).toBe(true);
    expect(worker.spec.replicas).toBeUndefined(); // the HPA owns it
  });

  it('gives a SIGTERM long enough for a checkpoint: grace period > the worker grace it is configured with', () => {
    const podGrace = workerPod.terminationGracePeriodSeconds as number;
    const defaults = loadWorkerConfig({});
    const configured = loadWorkerConfig(podEnv());
    expect(podGrace).toBeGreaterThanOrEqual(defaults.shutdownGraceMs / 1000);
    // the worker must be done (checkpoint written, job handed back) before the kubelet's SIGKILL, with a margin
    expect(podGrace).toBeGreaterThanOrEqual(configured.shutdownGraceMs / 1000 + 10);
    expect(configured.shutdownGraceMs).toBeGreaterThanOrEqual(60_000); // a checkpoint of a large K×D upload
    expect(worker.spec.strategy.rollingUpdate.maxSurge).toBe(0);
  });

  it('the ConfigMap (with the Secret example) is a valid worker configuration that agrees with the manifests', () => {
    const c = loadWorkerConfig(podEnv());
    expect(c.metricsPort).toBe(DEFAULT_METRICS_PORT);
    expect(c.cacheDir).toBe(workerContainer.volumeMounts.find((m: Obj) => m.name === 'cache').mountPath);
    expect(c.concurrency).toBe(1); // one job per GPU pod: the autoscaler's threshold of 1 assumes it
    expect(c.redis.host).toBe('kmfleet-redis');
    expect(c.redis.password).toBe(secretExample.stringData.REDIS_PASSWORD);
    expect(() => loadWorkerConfig({ ...podEnv(), KMFLEET_SHUTDOWN_GRACE_MS: 'soon' })).toThrow(/KMFLEET_SHUTDOWN_GRACE_MS/);
  });

  it('probes /readyz and /healthz on the metrics port the server uses', () => {
    const port = workerContainer.ports.find((p: Obj) => p.name === 'metrics');
    expect(port.containerPort).toBe(DEFAULT_METRICS_PORT);
    expect(Number(config.data.KMFLEET_METRICS_PORT)).toBe(port.containerPort);
    expect(workerContainer.readinessProbe.httpGet).toEqual({ path: READY_PATH, port: 'metrics' });
    expect(workerContainer.livenessProbe.httpGet).toEqual({ path: HEALTH_PATH, port: 'metrics' });
    expect(workerContainer.startupProbe.httpGet).toEqual({ path: HEALTH_PATH, port: 'metrics' });
    const ann = worker.spec.template.metadata.annotations;
    expect(ann['prometheus.io/port']).toBe(String(DEFAULT_METRICS_PORT));
    expect(ann['prometheus.io/path']).toBe(METRICS_PATH);
  });

  it('runs as the non-root uid of the Dockerfile, read-only root, no privilege escalation', () => {
    const dockerUser = /^USER\s+(\d+):(\d+)\s*$/m.exec(readFileSync(join(ROOT, 'Dockerfile'), 'utf8'))!;
    for (const { name, spec } of podSpecs().filter((p) => p.name !== 'kmfleet-redis')) {
      expect(spec.securityContext.runAsNonRoot, name).toBe(true);
      expect(spec.securityContext.runAsUser, name).toBe(Number(dockerUser[1]));
      expect(spec.securityContext.runAsGroup, name).toBe(Number(dockerUser[2]));
    }
    for (const { name, spec } of podSpecs()) {
      expect(spec.automountServiceAccountToken, name).toBe(false);
      for (const c of spec.containers) {
        expect(c.securityContext.allowPrivilegeEscalation, name).toBe(false);
        expect(c.securityContext.readOnlyRootFilesystem, name).toBe(true);
        expect(c.securityContext.capabilities.drop, name).toEqual(['ALL']);
      }
    }
    // read-only root: /tmp and the cache are volumes
    const mounts = workerContainer.volumeMounts.map((m: Obj) => m.mountPath);
    expect(mounts).toContain('/tmp');
    expect(mounts).toContain(config.data.KMFLEET_CACHE_DIR);
  });

  it('keeps the dataset cache on a local volume at KMFLEET_CACHE_DIR', () => {
    const mount = workerContainer.volumeMounts.find((m: Obj) => m.mountPath === config.data.KMFLEET_CACHE_DIR);
    const vol = workerPod.volumes.find((v: Obj) => v.name === mount.name);
    expect(vol.emptyDir ?? vol.hostPath ?? vol.ephemeral).toBeDefined();
    expect(vol.emptyDir?.sizeLimit).toBeUndefined(); // over a sizeLimit the kubelet evicts the pod
    // the image creates that directory for its user (a Docker named volume inherits the ownership)
    const dockerfile = readFileSync(join(ROOT, 'Dockerfile'), 'utf8');
    expect(dockerfile).toContain(`mkdir -p ${config.data.KMFLEET_CACHE_DIR}`);
    expect(dockerfile).toContain(`chown kmfleet:kmfleet ${config.data.KMFLEET_CACHE_DIR}`);
  });

  it('takes settings from the ConfigMap and secrets from the Secret, names and keys that exist', () => {
    for (const { name, spec } of podSpecs()) {
      for (const c of spec.containers) {
        for (const ef of c.envFrom ?? []) {
          if (ef.configMapRef) expect(find('ConfigMap', ef.configMapRef.name), name).toBeDefined();
          expect(ef.secretRef, `${name}: secrets by key, not envFrom`).toBeUndefined();
        }
        for (const e of c.env ?? []) {
          const ref = e.valueFrom?.secretKeyRef;
          if (!ref) continue;
          const secret = get('Secret', ref.name);
          expect(Object.keys(secret.stringData), `${name}: ${ref.key}`).toContain(ref.key);
        }
      }
      for (const v of spec.volumes ?? []) if (v.configMap) expect(find('ConfigMap', v.configMap.name), name).toBeDefined();
      if (spec.serviceAccountName) expect(find('ServiceAccount', spec.serviceAccountName), name).toBeDefined();
    }
    const envNames = workerContainer.env.map((e: Obj) => e.name);
    expect(envNames).toContain('REDIS_URL');
    expect(workerContainer.env.find((e: Obj) => e.name === 'REDIS_URL').valueFrom.secretKeyRef.name).toBe('kmfleet-secrets');
    // no secret in the ConfigMap
    for (const k of Object.keys(config.data)) expect(k).not.toMatch(/SECRET|PASSWORD|TOKEN|REDIS_URL|ACCESS_KEY/);
  });

  it('every ConfigMap key is an environment variable the code reads', () => {
    const read = envVarsReadByCode(ROOT);
    for (const k of Object.keys(config.data)) expect(read.has(k) || /^AWS_/.test(k), `${k} is read by nothing`).toBe(true);
  });
});

describe('services, budget, autoscaling, Redis', () => {
  it('every Service selects a workload and targets a named port it has', () => {
    for (const svc of resources.filter((d) => d.obj.kind === 'Service').map((d) => d.obj)) {
      const pods = podSpecs().filter((p) => selects(svc.spec.selector, p.labels));
      expect(pods.length, svc.metadata.name).toBe(1);
      for (const port of svc.spec.ports) {
        const names = pods[0].spec.containers.flatMap((c: Obj) => (c.ports ?? []).map((p: Obj) => p.name));
        expect(names, `${svc.metadata.name}:${port.targetPort}`).toContain(port.targetPort);
      }
    }
  });

  it('the PDB covers exactly the worker pods and lets drains take one at a time', () => {
    const pdb = get('PodDisruptionBudget', 'kmfleet-worker');
    expect(selects(pdb.spec.selector.matchLabels, worker.spec.template.metadata.labels)).toBe(true);
    expect(selects(pdb.spec.selector.matchLabels, exporter.spec.template.metadata.labels)).toBe(false);
    expect(pdb.spec.maxUnavailable).toBe(1);
  });

  it('the ServiceMonitor scrapes the workers and the queue exporter, and nothing else', () => {
    const sm = get('ServiceMonitor', 'kmfleet');
    const scraped = resources
      .filter((d) => d.obj.kind === 'Service' && selects(sm.spec.selector.matchLabels, d.obj.metadata.labels))
      .map((d) => d.obj.metadata.name)
      .sort();
    expect(scraped).toEqual(['kmfleet-queue-exporter', 'kmfleet-worker-metrics']);
    expect(sm.spec.namespaceSelector.matchNames).toEqual([kustomization.namespace]);
  });

  it('the queue exporter runs the module that exists, on the metrics port, without a GPU', () => {
    const c = exporter.spec.template.spec.containers[0];
    expect(c.command.slice(0, 3)).toEqual(['tini', '--', 'node']);
    const js = c.command[3] as string;
    expect(js).toMatch(/^dist\/.*\.js$/);
    expect(() => readFileSync(join(ROOT, js.replace(/^dist\//, '').replace(/\.js$/, '.ts')))).not.toThrow();
    expect(c.ports[0].containerPort).toBe(DEFAULT_METRICS_PORT);
    expect(c.readinessProbe.httpGet.path).toBe(READY_PATH);
    expect(c.resources.limits['nvidia.com/gpu']).toBeUndefined();
    expect(exporter.spec.replicas).toBe(1);
    expect(c.image).toBe(workerContainer.image);
  });

  it('KEDA scales 0..N on max(kmfleet_queue_pending) of our namespace and queue, never scaling a busy fleet down', () => {
    expect(scaled.spec.minReplicaCount).toBe(0);
    expect(scaled.spec.maxReplicaCount).toBeGreaterThanOrEqual(1);
    expect(scaled.spec.cooldownPeriod).toBeGreaterThan(0);
    const t = scaled.spec.triggers[0];
    expect(t.type).toBe('prometheus');
    expect(t.metadata.serverAddress).toMatch(/^https?:\/\//);
    expect(t.metadata.query).toMatch(/^max\(kmfleet_queue_pending\{/);
    expect(t.metadata.query).toContain(`namespace="${kustomization.namespace}"`);
    expect(t.metadata.query).toContain(`queue="${config.data.KMFLEET_QUEUE}"`);
    expect(t.metadata.threshold).toBe('1'); // one job per GPU pod
    expect(t.metadata.ignoreNullValues).toBe('false');
    expect(scaled.spec.advanced.horizontalPodAutoscalerConfig.behavior.scaleDown.selectPolicy).toBe('Disabled');
    expect(scaled.spec.fallback.replicas).toBeGreaterThanOrEqual(1);
  });

  it('Redis keeps every key: AOF on, maxmemory-policy noeviction, config mounted where the args read it', () => {
    const conf = get('ConfigMap', 'kmfleet-redis-config').data['redis.conf'] as string;
    const directive = (name: string) => new RegExp(`^${name}\\s+(.+)$`, 'm').exec(conf)?.[1].trim();
    expect(directive('appendonly')).toBe('yes');
    expect(directive('maxmemory-policy')).toBe('noeviction');
    expect(directive('dir')).toBe('/data');
    const c = redis.spec.template.spec.containers[0];
    const mount = c.volumeMounts.find((m: Obj) => m.name === 'config').mountPath;
    expect(c.args).toEqual([`${mount}/redis.conf`]); // the password is no argument
    // requirepass: a file the init container writes into the in-memory volume that redis.conf includes last
    const init = redis.spec.template.spec.initContainers.find((i: Obj) => i.name === 'auth-config');
    const authDir = init.volumeMounts.find((m: Obj) => m.name === 'auth').mountPath;
    expect(c.volumeMounts.find((m: Obj) => m.name === 'auth')).toMatchObject({ mountPath: authDir, readOnly: true });
    expect(redis.spec.template.spec.volumes.find((v: Obj) => v.name === 'auth').emptyDir.medium).toBe('Memory');
    const includes = [...conf.matchAll(/^include\s+(\S+)$/gm)].map((m) => m[1]);
    expect(includes).toEqual([`${authDir}/auth.conf`]);
    expect(conf.trim().split('\n').pop()!.trim()).toBe(`include ${authDir}/auth.conf`); // last: nothing overrides it
    expect(init.command.join(' ')).toContain(`> ${authDir}/auth.conf`);
    expect(init.env.find((e: Obj) => e.name === 'REDIS_PASSWORD').valueFrom.secretKeyRef.key).toBe('REDIS_PASSWORD');
    // the probes' redis-cli reads the password from REDISCLI_AUTH, the same Secret key
    expect(c.env.find((e: Obj) => e.name === 'REDISCLI_AUTH').valueFrom.secretKeyRef.key).toBe('REDIS_PASSWORD');
    expect(c.readinessProbe.exec.command.join(' ')).toMatch(/redis-cli ping/);
    expect(c.volumeMounts.find((m: Obj) => m.name === 'data').mountPath).toBe('/data');
    expect(redis.spec.volumeClaimTemplates[0].metadata.name).toBe('data');
    const headless = get('Service', redis.spec.serviceName);
    expect(headless.spec.clusterIP).toBe('None');
    // REDIS_URL of the example points at the Service and carries the same password as requirepass
    const url = new URL(secretExample.stringData.REDIS_URL);
    expect(url.hostname).toBe('kmfleet-redis');
    expect(find('Service', url.hostname)).toBeDefined();
    expect(decodeURIComponent(url.password)).toBe(secretExample.stringData.REDIS_PASSWORD);
  });
});

describe('who may reach Redis (protected-mode no)', () => {
  const policy = get('NetworkPolicy', 'kmfleet-redis');
  const conf = get('ConfigMap', 'kmfleet-redis-config').data['redis.conf'] as string;
  const clientLabel = policy.spec.ingress[0].from[0].podSelector.matchLabels as Record<string, string>;

  it('a NetworkPolicy selects the Redis pods and admits only labelled pods of this namespace, on the Redis port', () => {
    expect(conf).toMatch(/^protected-mode no$/m); // the reason the policy must exist
    expect(selects(policy.spec.podSelector.matchLabels, redis.spec.template.metadata.labels)).toBe(true);
    expect(policy.spec.policyTypes).toEqual(['Ingress']);
    expect(policy.spec.ingress).toHaveLength(1);
    const [rule] = policy.spec.ingress;
    expect(rule.from).toHaveLength(1);
    expect(rule.from[0].namespaceSelector).toBeUndefined(); // this namespace only
    expect(rule.from[0].ipBlock).toBeUndefined();
    expect(Object.keys(clientLabel)).toEqual(['kmfleet.io/redis-client']);
    expect(rule.ports).toEqual([{ port: redis.spec.template.spec.containers[0].ports[0].containerPort, protocol: 'TCP' }]);
  });

  it('every pod that connects to Redis (REDIS_URL) carries the client label, and Redis itself does not', () => {
    const clients = podSpecs().filter((p) => p.spec.containers.some((c: Obj) => (c.env ?? []).some((e: Obj) => e.name === 'REDIS_URL')));
    expect(clients.map((p) => p.name).sort()).toEqual(['kmfleet-queue-exporter', 'kmfleet-worker']);
    for (const p of clients) expect(selects(clientLabel, p.labels), p.name).toBe(true);
    expect(selects(clientLabel, redis.spec.template.metadata.labels)).toBe(false);
  });
});
