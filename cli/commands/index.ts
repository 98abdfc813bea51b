/**
 * The kmfleet commands, in the order `kmfleet --help` lists them. To add one: write cli/commands/<name>.ts exporting
 * a `register<Name>(program)` function and append it here.
 */
import type { Command } from 'commander';
import { registerFit } from './fit.js';
import { registerGenerate } from './generate.js';
import { registerWorker } from './worker.js';
import { registerDemo } from './demo.js';

export type RegisterCommand = (program: Command) => void;

export const commands: RegisterCommand[] = [
  registerFit,
  registerGenerate,
  registerWorker,
  registerDemo,
];
