/**
 * When kmfleet's processes trace (cli/tracing.ts): only when the standard OTEL_* variables ask for it, with the
 * exporters and the protocol kmfleet ships; anything else is refused naming the variable. Without tracing the span
 * helpers run their function and nothing is registered.
 */
import { describe, expect, it } from 'vitest';
import { startTracing, TracingConfigError, tracingSettingsFromEnv } from '../../cli/tracing.js';
import { queueTelemetry, tracingRegistered, withSpan } from '../../producer/telemetry.js';

describe('tracingSettingsFromEnv', () => {
  it('is off unless an exporter or an OTLP endpoint is configured', () => {
    expect(tracingSettingsFromEnv({})).toBeUndefined();
    expect(tracingSettingsFromEnv({ OTEL_SERVICE_NAME: 'x', OTEL_EXPORTER_OTLP_HEADERS: 'a=b' })).toBeUndefined();
    expect(tracingSettingsFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' })).toEqual({ exporters: ['otlp'] });
    expect(tracingSettingsFromEnv({ OTEL_EXPORTER_OTLP_TRACES_ENDPOINT: 'http://c:4318/v1/traces' })).toEqual({ exporters: ['otlp'] });
    expect(tracingSettingsFromEnv({ OTEL_TRACES_EXPORTER: 'otlp' })).toEqual({ exporters: ['otlp'] });
    expect(tracingSettingsFromEnv({ OTEL_TRACES_EXPORTER: ' console , otlp,console' })).toEqual({ exporters: ['console', 'otlp'] });
  });

  it('none and OTEL_SDK_DISABLED turn it off whatever else is set', () => {
    const endpoint = { OTEL_EXPORTER_OTLP_ENDPOINT: 'http://collector:4318' };
    expect(tracingSettingsFromEnv({ ...endpoint, OTEL_TRACES_EXPORTER: 'none' })).toBeUndefined();
    expect(tracingSettingsFromEnv({ ...endpoint, OTEL_SDK_DISABLED: 'true' })).toBeUndefined();
    expect(tracingSettingsFromEnv({ ...endpoint, OTEL_SDK_DISABLED: 'false' })).toEqual({ exporters: ['otlp'] });
  });

  it('refuses exporters and protocols it does not ship, naming the variable', () => {
    expect(() => tracingSettingsFromEnv({ OTEL_TRACES_EXPORTER: 'zipkin,otlp' })).toThrow(
      new TracingConfigError('OTEL_TRACES_EXPORTER: zipkin is not supported by kmfleet (otlp, console or none)'),
    );
    expect(() => tracingSettingsFromEnv({ OTEL_EXPORTER_OTLP_ENDPOINT: 'http://c:4317', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toThrow(
      /^OTEL_EXPORTER_OTLP_PROTOCOL=grpc: kmfleet exports OTLP over HTTP with protobuf only/,
    );
    expect(() => tracingSettingsFromEnv({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/json' })).toThrow(
      /^OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http\/json/,
    );
    // the traces-specific variable wins over the general one
    expect(tracingSettingsFromEnv({ OTEL_TRACES_EXPORTER: 'otlp', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc', OTEL_EXPORTER_OTLP_TRACES_PROTOCOL: 'http/protobuf' })).toEqual({
      exporters: ['otlp'],
    });
    // the console exporter needs no protocol
    expect(tracingSettingsFromEnv({ OTEL_TRACES_EXPORTER: 'console', OTEL_EXPORTER_OTLP_PROTOCOL: 'grpc' })).toEqual({ exporters: ['console'] });
  });
});

describe('without tracing', () => {
  it('starts nothing: no tracer registered, no BullMQ telemetry, span helpers run their function bare', async () => {
    expect(await startTracing({ env: {} })).toBe(false);
    expect(tracingRegistered()).toBe(false);
    expect(queueTelemetry()).toBeUndefined();
    expect(await withSpan('x', {}, async (span) => span)).toBeUndefined();
    await expect(withSpan('x', {}, async () => Promise.reject(new Error('boom')))).rejects.toThrow('boom');
  });
});
