/**
 * One job per GPU (DESIGN.md: a worker pod per GPU, or one process driving several): jobs running at once in this
 * process take distinct CUDA device ordinals, and give them back when they end. Without GPUs there is no pool and the
 * engine picks (the CPU backend ignores the ordinal).
 */
export class DevicePool {
  private readonly free: number[];

  constructor(readonly ordinals: number[]) {
    this.free = [...ordinals];
  }

  get size(): number {
    return this.ordinals.length;
  }

  /** A free ordinal (lowest first); undefined when all are taken (more jobs than GPUs: they share the last). */
  acquire(): number | undefined {
    this.free.sort((a, b) => a - b);
    return this.free.shift();
  }

  release(ordinal: number | undefined): void {
    if (ordinal !== undefined && this.ordinals.includes(ordinal) && !this.free.includes(ordinal)) this.free.push(ordinal);
  }
}
