/**
 * The GPUs of this process (DESIGN.md: a worker pod per GPU, or one process driving several): jobs running at once
 * take distinct CUDA device ordinals — one each, or several for a job across GPUs (spec.gpus) — and give them back
 * when they end. Without GPUs there is no pool and the engine picks (the CPU backend ignores the ordinal).
 */
export class DevicePool {
  private readonly free: number[];
  private waiting: (() => void)[] = [];

  constructor(readonly ordinals: number[]) {
    this.free = [...ordinals];
  }

  get size(): number {
    return this.ordinals.length;
  }

  /** The free ordinals, lowest first. */
  freeOrdinals(): number[] {
    return [...this.free].sort((a, b) => a - b);
  }

  /** Takes these ordinals (free ones; others are ignored). */
  take(ordinals: readonly number[]): number[] {
    const taken = ordinals.filter((o) => this.free.includes(o));
    for (const o of taken) this.free.splice(this.free.indexOf(o), 1);
    return taken;
  }

  /** A free ordinal (lowest first); undefined when all are taken (more jobs than GPUs: they share the last). */
  acquire(): number | undefined {
    return this.take(this.freeOrdinals().slice(0, 1))[0];
  }

  /** Resolves once some ordinal is free (at once when one is): a job across GPUs may have taken them all. */
  async anyFree(): Promise<void> {
    while (this.free.length === 0 && this.size > 0) await new Promise<void>((resolve) => this.waiting.push(resolve));
  }

  release(ordinals: number | readonly number[] | undefined): void {
    for (const o of typeof ordinals === 'number' ? [ordinals] : ordinals ?? [])
      if (this.ordinals.includes(o) && !this.free.includes(o)) this.free.push(o);
    const waiting = this.waiting;
    this.waiting = [];
    for (const wake of waiting) wake();
  }
}
