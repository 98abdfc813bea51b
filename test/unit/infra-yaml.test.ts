/**
 * Every YAML file under infra/ parses (strictly: no duplicate keys, no warnings), and every Kubernetes object among
 * them keeps the invariants of test/helpers/k8s-invariants.ts: pod templates meet Pod Security "restricted", namespaces
 * enforce it, and no secret reaches a command line. The Helm chart's templates are Go templates, not YAML: they are
 * rendered and held to the same rules by infra-helm.test.ts (when helm is installed); its values files are checked here.
 */
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative } from 'node:path';
import { parseAllDocuments } from 'yaml';
import { describe, expect, it } from 'vitest';
import { invariantViolations, namespaceViolations, podSpecOf, restrictedViolations, secretOnCommandLine } from '../helpers/k8s-invariants.js';

const ROOT = join(import.meta.dirname, '..', '..');
const INFRA = join(ROOT, 'infra');

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Obj = any;

function yamlFiles(dir: string): string[] {
  return readdirSync(dir).flatMap((name) => {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) return name === 'templates' ? [] : yamlFiles(p);
    return /\.ya?ml$/.test(name) ? [p] : [];
  });
}

function parse(file: string): Obj[] {
  return parseAllDocuments(readFileSync(file, 'utf8'), { uniqueKeys: true, merge: true }).map((d) => {
    const where = relative(ROOT, file);
    if (d.errors.length) throw new Error(`${where}: ${d.errors.map((e) => e.message).join('; ')}`);
    if (d.warnings.length) throw new Error(`${where}: ${d.warnings.map((e) => e.message).join('; ')}`);
    return d.toJS();
  });
}

const files = yamlFiles(INFRA);
const docs = files.flatMap((f) => parse(f).map((obj) => ({ file: relative(ROOT, f), obj })));
const k8s = docs.filter((d) => d.obj && typeof d.obj === 'object' && typeof d.obj.apiVersion === 'string' && typeof d.obj.kind === 'string');
/** The example Secret's values: none may appear on a command line. */
const secretValues = k8s.filter((d) => d.obj.kind === 'Secret').flatMap((d) => Object.values<string>(d.obj.stringData ?? {}));

describe('YAML under infra/', () => {
  it('every file parses strictly (compose, Prometheus, Grafana provisioning, Kubernetes, the chart values)', () => {
    const names = files.map((f) => relative(INFRA, f));
    for (const expected of ['compose/compose.yaml', 'prometheus/rules.yml', 'k8s/kustomization.yaml', 'k8s/worker-deployment.yaml', 'helm/kmfleet/values.yaml', 'helm/kmfleet/Chart.yaml']) {
      expect(names).toContain(expected);
    }
    expect(docs.length).toBeGreaterThanOrEqual(files.length);
  });

  it('pod templates meet Pod Security "restricted"; namespaces enforce it; no secret on a command line', () => {
    const pods = k8s.filter((d) => podSpecOf(d.obj));
    expect(pods.map((d) => d.obj.metadata.name).sort()).toEqual(['kmfleet-queue-exporter', 'kmfleet-redis', 'kmfleet-worker']);
    expect(k8s.some((d) => d.obj.kind === 'Namespace')).toBe(true);
    expect(secretValues.length).toBeGreaterThan(0);
    expect(invariantViolations(k8s.map((d) => d.obj), secretValues)).toEqual([]);
  });

  it('the checks catch what they are for (each can fail)', () => {
    const redis = structuredClone(k8s.find((d) => d.obj.kind === 'StatefulSet')!.obj);
    const c = redis.spec.template.spec.containers[0];
    c.args = ['/etc/redis/redis.conf', '--requirepass', '$(REDISCLI_AUTH)'];
    expect(secretOnCommandLine(redis).join('\n')).toMatch(/\$\(REDISCLI_AUTH\) puts a Secret's value into the argv/);
    expect(secretOnCommandLine(redis).join('\n')).toMatch(/password option/);
    c.args = ['/etc/redis/redis.conf'];
    c.readinessProbe.exec.command = ['sh', '-c', 'redis-cli -a "$REDISCLI_AUTH" ping'];
    expect(secretOnCommandLine(redis)).toHaveLength(1);
    c.readinessProbe.exec.command = ['sh', '-c', 'redis-cli ping'];
    expect(secretOnCommandLine(redis, ['change-me'])).toEqual([]);
    c.args = ['--token', 'change-me'];
    expect(secretOnCommandLine(redis, ['change-me'])).toHaveLength(1);

    const worker = structuredClone(k8s.find((d) => d.obj.kind === 'Deployment' && d.obj.metadata.name === 'kmfleet-worker')!.obj);
    expect(restrictedViolations(worker)).toEqual([]);
    const pod = worker.spec.template.spec;
    delete pod.securityContext.seccompProfile;
    pod.containers[0].securityContext.allowPrivilegeEscalation = true;
    pod.containers[0].securityContext.capabilities = { add: ['SYS_ADMIN'] };
    pod.volumes.push({ name: 'host', hostPath: { path: '/' } });
    pod.hostNetwork = true;
    delete pod.securityContext.runAsNonRoot;
    const found = restrictedViolations(worker).join('\n');
    for (const problem of ['seccompProfile is unset', 'allowPrivilegeEscalation', 'drop ALL', 'adds capability SYS_ADMIN', 'type hostPath', 'hostNetwork', 'runAsNonRoot']) {
      expect(found).toContain(problem);
    }
    expect(namespaceViolations({ kind: 'Namespace', metadata: { name: 'x', labels: { 'pod-security.kubernetes.io/enforce': 'baseline' } } })).toHaveLength(1);
  });
});
