/**
 * The S3 client factory. Credentials and region come from the AWS standard chain (env, profile, web identity, IMDS);
 * KMFLEET_S3_ENDPOINT points at MinIO or s3rver and implies path-style addressing.
 *
 * The s3rver compatibility switch (`compat: 's3rver'`, KMFLEET_S3_COMPAT=s3rver) exists because s3rver 3.7.1 breaks
 * in ways a real S3 does not (../shared/TOOLCHAIN.md): with the SDK's default checksums a streamed PutObject stores
 * the aws-chunked framing, AbortMultipartUpload answers 405, and a completed multipart object's ETag is the md5 of its
 * content instead of S3's md5 of its parts' md5s. The switch turns checksums to WHEN_REQUIRED, lets the multipart writer
 * treat a 405 on abort as "nothing more to do", and has a lost complete answer checked against the content's md5
 * (multipart-complete.ts). A real S3 or MinIO needs none of it.
 */
import { S3Client, type S3ClientConfig } from '@aws-sdk/client-s3';
import { Agent as HttpAgent } from 'node:http';
import { Agent as HttpsAgent } from 'node:https';
import { DirectReadHandler, type InnerHandler } from './direct-read.js';
import { S3ConfigError } from './errors.js';
import { DEFAULT_RETRY, type RetryPolicy } from './retry.js';

export type S3Compat = 'none' | 's3rver';

export interface S3Settings {
  /** custom endpoint (MinIO, s3rver); undefined for AWS */
  endpoint?: string;
  /** default: true when an endpoint is set */
  forcePathStyle?: boolean;
  region?: string;
  compat?: S3Compat;
  /** explicit credentials (tests, demo); undefined = the AWS standard chain */
  credentials?: { accessKeyId: string; secretAccessKey: string; sessionToken?: string };
  /** SDK attempts per request (backoff + jitter between them, standard retry mode) */
  maxAttempts?: number;
  /** our own retries around whole reads and writes, within a time budget (./retry.ts) */
  retry?: RetryPolicy;
  /** concurrent sockets per client */
  maxSockets?: number;
  /** per-request socket inactivity timeout in ms */
  requestTimeoutMs?: number;
  /** ranged GETs land straight in the caller's buffer (./direct-read.ts); default true, KMFLEET_S3_DIRECT_READS=0 off */
  directReads?: boolean;
}

export function s3SettingsFromEnv(env: NodeJS.ProcessEnv = process.env): S3Settings {
  const endpoint = env.KMFLEET_S3_ENDPOINT || undefined;
  const compat = (env.KMFLEET_S3_COMPAT || 'none') as S3Compat;
  if (compat !== 'none' && compat !== 's3rver') {
    throw new S3ConfigError(`KMFLEET_S3_COMPAT must be 'none' or 's3rver', got ${JSON.stringify(env.KMFLEET_S3_COMPAT)}`);
  }
  const pathStyle = env.KMFLEET_S3_FORCE_PATH_STYLE;
  // Static keys in the given env are used as they are (what the SDK's env provider would do with process.env), so a
  // config built from an env object (tests, the demo) carries its own keys; otherwise the full standard chain runs.
  const credentials =
    env.AWS_ACCESS_KEY_ID && env.AWS_SECRET_ACCESS_KEY
      ? { accessKeyId: env.AWS_ACCESS_KEY_ID, secretAccessKey: env.AWS_SECRET_ACCESS_KEY, ...(env.AWS_SESSION_TOKEN ? { sessionToken: env.AWS_SESSION_TOKEN } : {}) }
      : undefined;
  return {
    credentials,
    endpoint,
    forcePathStyle: pathStyle === undefined || pathStyle === '' ? endpoint !== undefined : pathStyle === 'true' || pathStyle === '1',
    region: env.AWS_REGION || env.AWS_DEFAULT_REGION || 'us-east-1',
    compat,
    maxAttempts: positiveInt(env.KMFLEET_S3_MAX_ATTEMPTS, 'KMFLEET_S3_MAX_ATTEMPTS') ?? 8,
    retry: { ...DEFAULT_RETRY, budgetMs: positiveInt(env.KMFLEET_S3_RETRY_BUDGET_MS, 'KMFLEET_S3_RETRY_BUDGET_MS') ?? DEFAULT_RETRY.budgetMs },
    maxSockets: positiveInt(env.KMFLEET_S3_MAX_SOCKETS, 'KMFLEET_S3_MAX_SOCKETS') ?? 64,
    requestTimeoutMs: positiveInt(env.KMFLEET_S3_REQUEST_TIMEOUT_MS, 'KMFLEET_S3_REQUEST_TIMEOUT_MS') ?? 120_000,
    directReads: flag(env.KMFLEET_S3_DIRECT_READS, 'KMFLEET_S3_DIRECT_READS') ?? true,
  };
}

function flag(v: string | undefined, name: string): boolean | undefined {
  if (v === undefined || v === '') return undefined;
  if (v === '1' || v === 'true') return true;
  if (v === '0' || v === 'false') return false;
  throw new S3ConfigError(`${name} must be 1/true or 0/false, got ${JSON.stringify(v)}`);
}

function positiveInt(v: string | undefined, name: string): number | undefined {
  if (v === undefined || v === '') return undefined;
  const n = Number(v);
  if (!Number.isInteger(n) || n <= 0) throw new S3ConfigError(`${name} must be a positive integer, got ${JSON.stringify(v)}`);
  return n;
}

/** A client plus the settings it was built from (the writers need `compat`). */
export interface S3Handle {
  client: S3Client;
  settings: Required<Pick<S3Settings, 'compat' | 'retry'>> & S3Settings;
  destroy(): void;
}

export function createS3(settings: S3Settings = s3SettingsFromEnv()): S3Handle {
  // The SDK warns on Node < 22 that its FUTURE releases will need Node 22; ours is pinned in the lockfile, so the notice
  // only clutters every worker log and CLI run. Its documented switch, unless the operator set it either way.
  process.env.AWS_SDK_JS_NODE_VERSION_SUPPORT_WARNING_DISABLED ??= 'true';
  const compat = settings.compat ?? 'none';
  const maxSockets = settings.maxSockets ?? 64;
  const requestTimeout = settings.requestTimeoutMs ?? 120_000;
  const connectionTimeout = 10_000;
  const config: S3ClientConfig = {
    region: settings.region ?? 'us-east-1',
    forcePathStyle: settings.forcePathStyle ?? settings.endpoint !== undefined,
    maxAttempts: settings.maxAttempts ?? 8,
    retryMode: 'standard',
    requestHandler: {
      requestTimeout,
      connectionTimeout,
      httpAgent: new HttpAgent({ keepAlive: true, maxSockets }),
      httpsAgent: new HttpsAgent({ keepAlive: true, maxSockets }),
    },
  };
  if (settings.endpoint) config.endpoint = settings.endpoint;
  if (settings.credentials) config.credentials = settings.credentials;
  if (compat === 's3rver') {
    config.requestChecksumCalculation = 'WHEN_REQUIRED';
    config.responseChecksumValidation = 'WHEN_REQUIRED';
  }
  const client = new S3Client(config);
  if (settings.directReads ?? true) {
    // wraps the handler the client built from the options above; send() reads config.requestHandler at each call
    const resolved = client.config as unknown as { requestHandler: InnerHandler };
    resolved.requestHandler = new DirectReadHandler(resolved.requestHandler, { connectionTimeoutMs: connectionTimeout, requestTimeoutMs: requestTimeout });
  }
  // The SDK's errors do not say which bucket or key they concern ("The specified bucket does not exist", "Access
  // Denied"): the request's Bucket and Key go onto the error, so a failed job's reason can name them (failures.ts).
  client.middlewareStack.add(
    (next, _context) => async (args) => {
      try {
        return await next(args);
      } catch (err) {
        const input = args.input as { Bucket?: unknown; Key?: unknown };
        if (err !== null && typeof err === 'object' && typeof input.Bucket === 'string' && !('s3Bucket' in err)) {
          Object.assign(err, { s3Bucket: input.Bucket, ...(typeof input.Key === 'string' ? { s3Key: input.Key } : {}) });
        }
        throw err;
      }
    },
    { step: 'initialize', name: 'kmfleetErrorLocation' },
  );
  return {
    client,
    settings: { ...settings, compat, retry: settings.retry ?? DEFAULT_RETRY },
    destroy: () => client.destroy(),
  };
}
