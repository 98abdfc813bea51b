import * as native from '../../native/index.js';
import type { Engine } from '../../native/index.js';
import type { Logger } from '../logger.js';
import type { FleetMetrics } from './index.js';

/**
 * The engine's device for /metrics: backend and device labels, and on CUDA the compute capability and the device
 * memory in use once the engine has planned and allocated (what an operator compares with the card's size). On CUDA
 * the device label is the card's name: the plan's device also names the assignment kernel, which depends on the
 * job's dims, and one card must stay one series.
 */
export function reportDevice(metrics: FleetMetrics | undefined, engine: Engine, ordinal: number, log: Logger): void {
  if (!metrics) return;
  if (engine.plan.backend !== 'cuda') {
    metrics.deviceInfo({ backend: engine.plan.backend, device: engine.plan.device });
    return;
  }
  try {
    const gpu = native.gpuInfo().devices.find((d) => d.ordinal === ordinal);
    const device = gpu?.name ?? engine.plan.device;
    metrics.deviceInfo({ backend: 'cuda', device, computeCapability: gpu?.computeCapability });
    if (gpu) metrics.deviceMemoryUsed(gpu.totalMemory - gpu.freeMemory, device);
  } catch (err) {
    log.warn({ err }, 'device query for metrics failed'); // metrics must never fail a job
  }
}
