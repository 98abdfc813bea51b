/**
 * Where a run's rows came from, for a summary: rows and bytes per pass by tier — the backend's resident rows, the
 * engine's host tier, and the rows fed from the source (a local file, the worker's memory cache, its disk cache, S3).
 * Bytes are the rows' bytes as each tier holds them: the source's for fed rows; for resident and host-tier rows the
 * engine's (half of the source's in an fp16/bf16 job over f32 rows).
 */
import type { PassRows, RunTiers } from './types.js';

export type FedFrom = 'file' | 'memory' | 'disk' | 's3';

export interface PassTierSummary {
  rows: PassRows;
  bytes: { resident: number; host: number; fed: number };
}

export interface TierSummary {
  /** where the fed rows came from on passes after the first */
  fedFrom: FedFrom;
  firstPass: PassTierSummary;
  /** the last pass: what every pass after the first costs */
  laterPasses: PassTierSummary;
  hostTierWarning?: string;
}

export function tierSummary(tiers: RunTiers, rowBytes: number, fedFrom: FedFrom): TierSummary {
  const held = tiers.heldRowBytes;
  const of = (p: PassRows): PassTierSummary => ({
    rows: { ...p },
    bytes: { resident: p.resident * held, host: p.host * held, fed: p.fed * rowBytes },
  });
  const s: TierSummary = { fedFrom, firstPass: of(tiers.firstPass), laterPasses: of(tiers.lastPass) };
  if (tiers.hostTierWarning) s.hostTierWarning = tiers.hostTierWarning;
  return s;
}
