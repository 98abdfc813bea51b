/**
 * Rules every Kubernetes object of infra/ keeps, whether written by hand (infra/k8s) or rendered from the Helm chart
 * (infra/helm/kmfleet): the Pod Security Standard "restricted" for each pod template, the restricted label on each
 * Namespace, and no secret on a command line (where `ps`, the pod spec and audit logs show it).
 */

// eslint-disable-next-line @typescript-eslint/no-explicit-any
type Obj = any;

/** The pod template of a workload (or a Pod's own spec), with where it sits. */
export function podSpecOf(obj: Obj): { metadata: Obj; spec: Obj } | undefined {
  switch (obj?.kind) {
    case 'Pod':
      return { metadata: obj.metadata, spec: obj.spec };
    case 'Deployment':
    case 'StatefulSet':
    case 'DaemonSet':
    case 'ReplicaSet':
    case 'Job':
      return obj.spec?.template && { metadata: obj.spec.template.metadata, spec: obj.spec.template.spec };
    case 'CronJob':
      return obj.spec?.jobTemplate?.spec?.template && { metadata: obj.spec.jobTemplate.spec.template.metadata, spec: obj.spec.jobTemplate.spec.template.spec };
    default:
      return undefined;
  }
}

const containersOf = (spec: Obj): Obj[] => [...(spec.initContainers ?? []), ...(spec.containers ?? []), ...(spec.ephemeralContainers ?? [])];

/** Volume types the restricted profile allows. */
const RESTRICTED_VOLUMES = new Set(['configMap', 'csi', 'downwardAPI', 'emptyDir', 'ephemeral', 'persistentVolumeClaim', 'projected', 'secret']);

/**
 * Where a pod template breaks the Pod Security Standard "restricted" (Kubernetes docs, "Pod Security Standards"), as
 * `name: problem` lines; empty when it complies.
 */
export function restrictedViolations(obj: Obj): string[] {
  const pod = podSpecOf(obj);
  if (!pod) return [];
  const { spec } = pod;
  const name = `${obj.kind} ${obj.metadata?.name}`;
  const out: string[] = [];
  const bad = (what: string) => out.push(`${name}: ${what}`);
  for (const k of ['hostNetwork', 'hostPID', 'hostIPC']) if (spec[k]) bad(`${k} is on`);
  for (const v of spec.volumes ?? []) {
    const type = Object.keys(v).find((k) => k !== 'name');
    if (!type || !RESTRICTED_VOLUMES.has(type)) bad(`volume ${v.name} is of type ${type}`);
  }
  const podCtx = spec.securityContext ?? {};
  if (podCtx.runAsUser === 0) bad('pod runAsUser 0');
  const podSeccomp = podCtx.seccompProfile?.type;
  if (podSeccomp !== undefined && podSeccomp !== 'RuntimeDefault' && podSeccomp !== 'Localhost') bad(`pod seccompProfile ${podSeccomp}`);
  for (const s of podCtx.sysctls ?? []) bad(`sysctl ${s.name} (none is needed)`);
  for (const c of containersOf(spec)) {
    const ctx = c.securityContext ?? {};
    const cname = `container ${c.name}`;
    if (ctx.privileged) bad(`${cname} is privileged`);
    if (ctx.allowPrivilegeEscalation !== false) bad(`${cname}: allowPrivilegeEscalation is not false`);
    const drop: string[] = ctx.capabilities?.drop ?? [];
    if (!drop.includes('ALL')) bad(`${cname}: capabilities do not drop ALL`);
    for (const cap of ctx.capabilities?.add ?? []) if (cap !== 'NET_BIND_SERVICE') bad(`${cname} adds capability ${cap}`);
    const nonRoot = ctx.runAsNonRoot ?? podCtx.runAsNonRoot;
    if (nonRoot !== true) bad(`${cname}: runAsNonRoot is not true (pod or container)`);
    if (ctx.runAsUser === 0) bad(`${cname}: runAsUser 0`);
    const seccomp = ctx.seccompProfile?.type ?? podSeccomp;
    if (seccomp !== 'RuntimeDefault' && seccomp !== 'Localhost') bad(`${cname}: seccompProfile is ${seccomp ?? 'unset'}`);
    if (ctx.procMount && ctx.procMount !== 'Default') bad(`${cname}: procMount ${ctx.procMount}`);
    for (const p of c.ports ?? []) if (p.hostPort) bad(`${cname}: hostPort ${p.hostPort}`);
  }
  return out;
}

/** Namespaces must enforce the restricted profile. */
export function namespaceViolations(obj: Obj): string[] {
  if (obj?.kind !== 'Namespace') return [];
  const level = obj.metadata?.labels?.['pod-security.kubernetes.io/enforce'];
  return level === 'restricted' ? [] : [`Namespace ${obj.metadata?.name}: pod-security.kubernetes.io/enforce is ${level ?? 'unset'}, not restricted`];
}

/** Options of common tools that take a password as an argument. */
const PASSWORD_FLAGS = [/(^|\s)--requirepass\b/, /(^|\s)-a\s+["']?\$/, /(^|\s)--pass(word)?\b/, /(^|\s)--auth\b/, /\brequirepass\s+\$/];

/**
 * Secrets on a command line: a container's (or probe's, or hook's) command or args that interpolates an environment
 * variable taken from a Secret — `$(VAR)` is expanded by the kubelet into the process's argv — or that passes a
 * password option (`--requirepass`, `redis-cli -a`, `--password`), or that holds one of `secretValues` as is.
 * A shell script that reads "$VAR" itself (a builtin, or a pipe into a program's stdin) is fine: its argv holds the name.
 */
export function secretOnCommandLine(obj: Obj, secretValues: readonly string[] = []): string[] {
  const pod = podSpecOf(obj);
  if (!pod) return [];
  const out: string[] = [];
  for (const c of containersOf(pod.spec)) {
    const fromSecret = new Set<string>((c.env ?? []).filter((e: Obj) => e.valueFrom?.secretKeyRef).map((e: Obj) => e.name as string));
    const wholeSecrets = (c.envFrom ?? []).some((e: Obj) => e.secretRef);
    const lines: [string, string[]][] = [
      ['command', c.command ?? []],
      ['args', c.args ?? []],
      ...(['startupProbe', 'readinessProbe', 'livenessProbe'] as const).map((p): [string, string[]] => [p, c[p]?.exec?.command ?? []]),
      ...(['postStart', 'preStop'] as const).map((h): [string, string[]] => [h, c.lifecycle?.[h]?.exec?.command ?? []]),
    ];
    for (const [where, argv] of lines) {
      const text = argv.map(String).join(' ');
      const at = `${obj.kind} ${obj.metadata?.name} container ${c.name} ${where}`;
      for (const m of text.matchAll(/\$\(([A-Za-z_][A-Za-z0-9_]*)\)/g)) {
        // with envFrom a Secret, any $(VAR) not set plainly in env may come from it
        const plain = (c.env ?? []).some((e: Obj) => e.name === m[1] && e.value !== undefined);
        if (fromSecret.has(m[1]) || (wholeSecrets && !plain)) out.push(`${at}: $(${m[1]}) puts a Secret's value into the argv`);
      }
      for (const flag of PASSWORD_FLAGS) if (flag.test(text)) out.push(`${at}: a password option (${flag.source}) in ${JSON.stringify(text)}`);
      for (const v of secretValues) if (v && text.includes(v)) out.push(`${at}: holds a secret value as is`);
    }
  }
  return out;
}

/** All three checks over a list of objects. */
export function invariantViolations(objs: readonly Obj[], secretValues: readonly string[] = []): string[] {
  return objs.flatMap((o) => [...restrictedViolations(o), ...namespaceViolations(o), ...secretOnCommandLine(o, secretValues)]);
}
