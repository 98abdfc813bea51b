/**
 * The kmfleet commands, in the order `kmfleet --help` lists them. To add one: write cli/commands/<name>.ts exporting
 * a `register<Name>(program)` function and append it here.
 */
import type { Command } from 'commander';
import { registerFit } from './fit.js';
import { registerGenerate } from './generate.js';
import { registerWorker } from './worker.js';
import { registerEnqueue } from './enqueue.js';
import { registerStatus } from './status.js';
import { registerWait } from './wait.js';
import { registerCancel } from './cancel.js';
import { registerSchedule } from './schedule.js';
import { registerUnschedule } from './unschedule.js';
import { registerHistory } from './history.js';
import { registerDemo } from './demo.js';
import { registerDashboard } from './dashboard.js';

export type RegisterCommand = (program: Command) => void;

export const commands: RegisterCommand[] = [
  registerFit,
  registerGenerate,
  registerWorker,
  registerDemo,
  registerEnqueue,
  registerStatus,
  registerWait,
  registerCancel,
  registerSchedule,
  registerUnschedule,
  registerHistory,
  registerDashboard,
];
