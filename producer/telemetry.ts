/**
 * Spans through the OpenTelemetry API alone: they record only where a process registered an SDK (kmfleet's own
 * processes do when the OTEL_* environment configures an exporter, cli/tracing.ts; an application embedding the SDK
 * registers its own). Without one nothing here creates a span, and BullMQ gets no telemetry: jobs carry no trace
 * context and cost nothing more.
 *
 *   new Queue(name, { ..., telemetry: queueTelemetry() });          // BullMQ's spans, the trace context in the job
 *   await withSpan('kmfleet.enqueue', { 'kmfleet.job.id': id }, () => ...);
 */
import { context, ProxyTracerProvider, SpanStatusCode, trace, type Attributes, type Span } from '@opentelemetry/api';
import type { Telemetry } from 'bullmq';
import { BullMQOtel } from 'bullmq-otel';

/** The instrumentation scope of every kmfleet span. */
export const TRACER_NAME = 'kmfleet';

/** Whether a tracer provider (an SDK) is registered in this process: without one every span would be a no-op. */
export function tracingRegistered(): boolean {
  const provider = trace.getTracerProvider();
  return !(provider instanceof ProxyTracerProvider) || provider.getDelegateTracer(TRACER_NAME) !== undefined;
}

/** BullMQ's telemetry (producer and consumer spans, the trace context carried in the job) when tracing is on. */
export function queueTelemetry(): Telemetry | undefined {
  return tracingRegistered() ? new BullMQOtel({ tracerName: TRACER_NAME }) : undefined;
}

/**
 * Runs `fn` in a span that is the active one for everything it awaits (Redis and S3 client spans nest under it); an
 * error is recorded on the span and rethrown. Without tracing, `fn` runs as it is.
 */
export async function withSpan<T>(name: string, attributes: Attributes, fn: (span?: Span) => Promise<T>): Promise<T> {
  if (!tracingRegistered()) return fn();
  return trace.getTracer(TRACER_NAME).startActiveSpan(name, { attributes }, async (span) => {
    try {
      return await fn(span);
    } catch (err) {
      span.recordException(err instanceof Error ? err : String(err));
      span.setStatus({ code: SpanStatusCode.ERROR, message: err instanceof Error ? err.message : String(err) });
      throw err;
    } finally {
      span.end();
    }
  });
}

/** A span for something that already happened (an engine pass, timed by the engine), under the active span. */
export function recordSpan(name: string, durationMs: number, attributes: Attributes): void {
  if (!tracingRegistered()) return;
  const end = Date.now();
  trace.getTracer(TRACER_NAME).startSpan(name, { attributes, startTime: end - durationMs }, context.active()).end(end);
}

/** The active span's ids as log fields (the names of OpenTelemetry's log data model), or none. */
export function traceLogFields(): { trace_id?: string; span_id?: string; trace_flags?: string } {
  const ctx = trace.getActiveSpan()?.spanContext();
  if (!ctx || !trace.isSpanContextValid(ctx)) return {};
  return { trace_id: ctx.traceId, span_id: ctx.spanId, trace_flags: `0${ctx.traceFlags.toString(16)}` };
}
