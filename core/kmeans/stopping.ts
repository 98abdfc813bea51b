/**
 * When Lloyd's iterations stop, checked after each iteration in this order:
 *   tolReassign — kmcuda's rule: reassigned / rows ≤ tolReassign. With tolReassign = 0 this is sklearn's "strict
 *                 convergence" (no label changed), which sklearn also checks first.
 *   tol         — sklearn's rule: Σ‖Δc‖² ≤ tol × mean per-feature variance of the data.
 *   maxIter     — not converged.
 */
import type { IterationReport, KmeansSpec, StopReason } from './types.js';

export function stopReason(report: IterationReport, spec: Pick<KmeansSpec, 'tol' | 'tolReassign' | 'maxIter'>, dataVariance: number): StopReason | null {
  if (report.reassignedFraction <= spec.tolReassign) return 'tolReassign';
  if (report.shift <= spec.tol * dataVariance) return 'tol';
  if (report.iteration >= spec.maxIter) return 'maxIter';
  return null;
}
