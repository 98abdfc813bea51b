/**
 * The OpenTelemetry SDK of kmfleet's processes (`kmfleet worker`, `enqueue`, `api`, …): bin/kmfleet.js starts it before
 * it loads anything else, and only when the standard OTEL_* environment asks for traces (docs/operations.md, Tracing).
 * Otherwise nothing of the SDK is loaded, and every span of producer/telemetry.ts is skipped.
 *
 * When on: spans go through a batch processor to an OTLP/HTTP (protobuf) exporter (its endpoint, headers and timeout:
 * the OTEL_EXPORTER_OTLP_* variables, read by the exporter) or to stdout (`console`); W3C trace context is what BullMQ
 * carries from the producer's job to the worker; the AWS SDK (S3) and ioredis get their official instrumentations, the
 * Redis spans only under a span of ours or BullMQ's (a worker's idle polling makes none), naming the command alone.
 */
import type { SpanProcessor } from '@opentelemetry/sdk-trace-base';
import { KmfleetInputError } from '../errors/index.js';

export type TraceExporterName = 'otlp' | 'console';

export interface TracingSettings {
  exporters: TraceExporterName[];
}

/** OTEL_* asks for something kmfleet does not export (bad input: exit 2). */
export class TracingConfigError extends KmfleetInputError {
  override readonly code = 'TRACING_CONFIG';
}

const SUPPORTED_PROTOCOL = 'http/protobuf';

/**
 * Whether, and where, to export traces: OTEL_TRACES_EXPORTER (`otlp`, `console`, `none`; a comma list), else `otlp`
 * when an OTLP endpoint is set, else off (unlike the SDK's own default: a worker never sends to a collector nobody
 * configured). OTEL_SDK_DISABLED=true turns it off whatever else is set.
 */
export function tracingSettingsFromEnv(env: NodeJS.ProcessEnv = process.env): TracingSettings | undefined {
  if ((env.OTEL_SDK_DISABLED ?? '').trim().toLowerCase() === 'true') return undefined;
  const named = (env.OTEL_TRACES_EXPORTER ?? '').split(',').map((s) => s.trim().toLowerCase()).filter(Boolean);
  const unknown = named.filter((n) => n !== 'otlp' && n !== 'console' && n !== 'none');
  if (unknown.length > 0) {
    throw new TracingConfigError(`OTEL_TRACES_EXPORTER: ${unknown.join(', ')} is not supported by kmfleet (otlp, console or none)`);
  }
  if (named.includes('none')) return undefined;
  const endpoint = env.OTEL_EXPORTER_OTLP_TRACES_ENDPOINT || env.OTEL_EXPORTER_OTLP_ENDPOINT;
  const exporters = (named.length > 0 ? [...new Set(named)] : endpoint ? ['otlp'] : []) as TraceExporterName[];
  if (exporters.length === 0) return undefined;
  if (exporters.includes('otlp')) {
    const variable = env.OTEL_EXPORTER_OTLP_TRACES_PROTOCOL ? 'OTEL_EXPORTER_OTLP_TRACES_PROTOCOL' : 'OTEL_EXPORTER_OTLP_PROTOCOL';
    const protocol = (env[variable] || SUPPORTED_PROTOCOL).trim();
    if (protocol !== SUPPORTED_PROTOCOL) {
      throw new TracingConfigError(
        `${variable}=${protocol}: kmfleet exports OTLP over HTTP with protobuf only (${SUPPORTED_PROTOCOL}, a collector's port 4318)`,
      );
    }
  }
  return { exporters };
}

export interface StartTracingOptions {
  env?: NodeJS.ProcessEnv;
  /** replaces the exporters the environment names, and turns tracing on without them (tests: an in-memory exporter) */
  spanProcessor?: SpanProcessor;
}

let active: { shutdown(): Promise<void> } | undefined;
let hookRegistered = false;

/**
 * Starts the SDK if the environment (or `spanProcessor`) asks for it; resolves true when tracing is on. Must run before
 * ioredis and the AWS SDK are first imported: their instrumentations patch them as they load.
 */
export async function startTracing(opts: StartTracingOptions = {}): Promise<boolean> {
  if (active) return true;
  const settings = opts.spanProcessor ? undefined : tracingSettingsFromEnv(opts.env);
  if (!opts.spanProcessor && !settings) return false;

  if (!hookRegistered) {
    // ioredis is imported from ES modules (bullmq's and ours), which only a loader hook sees; the hook handles just the
    // modules an instrumentation names (the AWS SDK loads through require, patched without it)
    const { register } = await import('node:module');
    const { createAddHookMessageChannel } = await import('import-in-the-middle');
    const channel = createAddHookMessageChannel();
    register('import-in-the-middle/hook.mjs', import.meta.url, channel.registerOptions);
    hookRegistered = true;
    await startSdk(opts.spanProcessor, settings);
    await channel.waitForAllMessagesAcknowledged();
  } else {
    await startSdk(opts.spanProcessor, settings);
  }
  return true;
}

async function startSdk(spanProcessor: SpanProcessor | undefined, settings: TracingSettings | undefined): Promise<void> {
  const [{ NodeTracerProvider }, base, resources, { registerInstrumentations }, { IORedisInstrumentation }, { AwsInstrumentation }] = await Promise.all([
    import('@opentelemetry/sdk-trace-node'),
    import('@opentelemetry/sdk-trace-base'),
    import('@opentelemetry/resources'),
    import('@opentelemetry/instrumentation'),
    import('@opentelemetry/instrumentation-ioredis'),
    import('@opentelemetry/instrumentation-aws-sdk'),
  ]);
  const processors: SpanProcessor[] = spanProcessor ? [spanProcessor] : [];
  for (const name of settings?.exporters ?? []) {
    if (name === 'console') processors.push(new base.BatchSpanProcessor(new base.ConsoleSpanExporter()));
    else {
      const { OTLPTraceExporter } = await import('@opentelemetry/exporter-trace-otlp-proto');
      processors.push(new base.BatchSpanProcessor(new OTLPTraceExporter()));
    }
  }
  // service.name 'kmfleet' unless OTEL_SERVICE_NAME / OTEL_RESOURCE_ATTRIBUTES say otherwise (the env detector)
  const resource = resources
    .defaultResource()
    .merge(resources.resourceFromAttributes({ 'service.name': 'kmfleet' }))
    .merge(resources.detectResources({ detectors: [resources.hostDetector, resources.envDetector] }));
  const provider = new NodeTracerProvider({ resource, spanProcessors: processors });
  provider.register();
  const unregister = registerInstrumentations({
    tracerProvider: provider,
    instrumentations: [
      // the command name alone: EVAL's arguments would put BullMQ's scripts and the job's data in every span
      new IORedisInstrumentation({ requireParentSpan: true, dbStatementSerializer: (command) => command }),
      new AwsInstrumentation(),
    ],
  });
  const api = await import('@opentelemetry/api');
  active = {
    async shutdown() {
      unregister();
      try {
        await provider.shutdown();
      } finally {
        api.trace.disable();
        api.context.disable();
        api.propagation.disable();
      }
    },
  };
}

/** Exports the spans still buffered and stops the SDK, waiting at most `timeoutMs` (a collector may be down). */
export async function stopTracing(timeoutMs = 2000): Promise<void> {
  const tracing = active;
  active = undefined;
  if (!tracing) return;
  let timer: NodeJS.Timeout | undefined;
  const timeout = new Promise<void>((resolve) => (timer = setTimeout(resolve, timeoutMs)));
  await Promise.race([tracing.shutdown().catch(() => {}), timeout]);
  clearTimeout(timer);
}
