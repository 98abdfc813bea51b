/**
 * A documentation block run in a child process of its own process group (so that what it starts in the background
 * stops with it), its stdout and stderr collected together: run to its exit, or — a block that starts a server and
 * never exits — until its URL answers, then stopped. The runners of test/integration/doc-*-blocks.test.ts use it.
 */
import { spawn, type ChildProcess } from 'node:child_process';

export interface BlockProcess {
  child: ChildProcess;
  /** stdout and stderr, interleaved as they came */
  output(): string;
  stderr(): string;
  /** the exit code, or null when a signal ended it */
  exited: Promise<number | null>;
}

export function startBlock(command: string, args: string[], opts: { cwd: string; env: NodeJS.ProcessEnv }): BlockProcess {
  const child = spawn(command, args, { cwd: opts.cwd, env: opts.env, detached: true, stdio: ['ignore', 'pipe', 'pipe'] });
  let out = '';
  let err = '';
  child.stdout!.on('data', (d) => (out += d));
  child.stderr!.on('data', (d) => {
    out += d;
    err += d;
  });
  // a test run that dies leaves no block's processes behind
  const onExit = () => signalGroup(child, 'SIGKILL');
  process.once('exit', onExit);
  const exited = new Promise<number | null>((resolve) =>
    child.once('exit', (code) => {
      process.off('exit', onExit);
      resolve(code);
    }),
  );
  return { child, output: () => out, stderr: () => err, exited };
}

function signalGroup(child: ChildProcess, signal: NodeJS.Signals): void {
  try {
    process.kill(-child.pid!, signal);
  } catch {
    // the group is gone
  }
}

/** Wait for the block's exit; past `timeoutMs` its group is killed (the exit code is then null). */
export async function runToExit(p: BlockProcess, timeoutMs: number): Promise<number | null> {
  const timer = setTimeout(() => signalGroup(p.child, 'SIGKILL'), timeoutMs);
  try {
    return await p.exited;
  } finally {
    clearTimeout(timer);
    signalGroup(p.child, 'SIGKILL'); // anything it left running in the background
  }
}

/** Poll `url` until it answers 2xx; fails with the block's output on a 4xx, if the block exits first or `timeoutMs` passes. */
export async function untilAnswers(p: BlockProcess, url: string, timeoutMs: number): Promise<Response> {
  let ended = false;
  void p.exited.then(() => (ended = true));
  const end = Date.now() + timeoutMs;
  let last = 'no answer';
  for (;;) {
    if (ended) throw new Error(`the server block exited before ${url} answered:\n${p.output()}`);
    const r = await fetch(url, { signal: AbortSignal.timeout(2000) }).catch((err: Error) => {
      last = String(err.cause ?? err); // not listening yet
    });
    if (r?.ok) return r;
    // up, but wrong: a server still starting answers 5xx at most
    if (r && r.status < 500) throw new Error(`${url} answered HTTP ${r.status}: ${await r.text()}\n${p.output()}`);
    if (r) last = `HTTP ${r.status}`;
    if (Date.now() > end) throw new Error(`${url} did not answer within ${timeoutMs} ms (${last}):\n${p.output()}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

/** SIGTERM the block's group (a server closes cleanly), SIGKILL what is left after `graceMs`. */
export async function stopBlock(p: BlockProcess, graceMs = 10_000): Promise<void> {
  signalGroup(p.child, 'SIGTERM');
  const timer = setTimeout(() => signalGroup(p.child, 'SIGKILL'), graceMs);
  await p.exited;
  clearTimeout(timer);
  signalGroup(p.child, 'SIGKILL');
}
