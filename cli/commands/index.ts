/**
 * The kmfleet command line: every command with its arguments and options, in the order `kmfleet --help` lists them.
 * What a command does lives in cli/commands/<name>.ts (exporting `action`) and is imported only when that command
 * runs: `--help`, a usage error, or one command never load the engine, BullMQ or the S3 SDK of the others.
 * To add a command: write cli/commands/<name>.ts exporting `action`, and define the command here.
 */
import { InvalidArgumentError, Option, type Command } from 'commander';
import { DATASET_FORMATS } from '../../producer/spec-vocabulary.js';
import {
  addConnectionOptions, addGlobalConnectionOptions, addSpecOptions, msOption, nonNegativeInt, nonNegativeNumber, positiveInt,
} from '../options.js';

/**
 * The action of a command module, imported when the command runs. Commander passes the arguments, the options and the
 * command; the action gets the options merged with the global ones given before the command's name.
 */
function lazy(load: () => Promise<{ action: (...args: never[]) => Promise<void> }>): (...args: unknown[]) => Promise<void> {
  return async (...args) => {
    const cmd = args[args.length - 1] as Command;
    args[args.length - 2] = cmd.optsWithGlobals();
    const { action } = await load();
    await (action as (...a: unknown[]) => Promise<void>)(...args);
  };
}

export function defineCommands(program: Command): void {
  // also accepted before the command's name: `kmfleet --redis-url redis://h:6379 status job-1`
  addGlobalConnectionOptions(program);

  program
    .command('fit')
    .description('cluster a local .npy / raw f32 / raw f16 file; writes centroids.npy, assignments.npy and summary.json to --out')
    .requiredOption('--input <file>', 'dataset: .npy (float32 or float16, C order), .npz, .parquet (a list<float> column), .arrow/.feather/.arrows (Arrow IPC: a FixedSizeList or List of float column), .fvecs, .bvecs, or raw rows (--format f32|f16 --dims D)')
    .option('--k <n>', 'number of clusters (default: the rows of --init centroids.npy)', positiveInt('--k'))
    .addOption(new Option('--metric <metric>', 'distance').choices(['l2', 'cosine']).default('l2'))
    .option('--init <method>', 'kmeans++ | random | a centroids .npy file (K×D)', 'kmeans++')
    .option('--max-iter <n>', 'iterations at most (1 or more, as in a job spec)', positiveInt('--max-iter'), 300)
    .option('--tol <x>', "stop when the centroid shift Σ‖Δc‖² ≤ tol × mean feature variance (sklearn's tol)", nonNegativeNumber('--tol'), 1e-4)
    .option('--tol-reassign <x>', 'stop when the fraction of rows that changed cluster ≤ x (0: only when none did)', nonNegativeNumber('--tol-reassign', 1), 0)
    .option('--seed <n>', 'seed of the init', nonNegativeInt('--seed'), 0)
    .addOption(new Option('--precision <p>', 'fp32, fp16, bf16: exact labels (fp16, bf16: of the rows rounded to that type); tf32: one tensor-core product a distance, approximate labels').choices(['auto', 'fp32', 'tf32', 'bf16', 'fp16']).default('auto'))
    .addOption(new Option('--backend <b>', 'engine backend').choices(['auto', 'cpu', 'cuda']).default('auto'))
    .addOption(new Option('--format <f>', 'dataset format (default: by the extension, .npy .npz .parquet .arrow .arrows .feather .fvecs .bvecs)').choices([...DATASET_FORMATS]))
    .option('--member <name>', 'npz: the array to read (default: the only one, or arr_0)')
    .option('--column <name>', 'parquet, arrow: the column of embeddings (default: the only column)')
    .option('--dims <d>', 'dimensions per row (raw formats)', positiveInt('--dims'))
    .addOption(new Option('--convert <c>', 'also read a float64 .npy (or a Parquet or Arrow column of doubles), rounded to float32 as it is read').choices(['f64-to-f32']))
    .option('--chunk-rows <n>', 'rows per host buffer (default: the planner picks)', positiveInt('--chunk-rows'))
    .option('--threads <n>', 'CPU threads (default: all cores)', positiveInt('--threads'))
    .option('--gpu-memory <size>', 'device memory the job may take in all, e.g. 12G; rows that do not fit go to host memory; 0 keeps no rows on the device (the CPU backend: memory for its resident rows; default: what the device has free)')
    .option('--gpus <n>', 'GPUs the job runs on, its rows split between them (the same bits as on one): a count, all, or auto — as many as hold the rows on their devices (default 1)')
    .option('--host-memory <size>', 'host memory for the rows that do not fit the device, e.g. 64G, 0 for none (default: what the host can spare)')
    .option('--distances', 'also write distances.npy (float32 N: distance of each row to its centroid)')
    .requiredOption('--out <dir>', 'output directory (created if missing)')
    .option('--json', 'print the summary as one JSON object on stdout (progress as JSON lines on stderr)')
    .action(lazy(() => import('./fit.js')));

  program
    .command('generate')
    .description('write a seeded synthetic dataset (.npy), streamed: gaussian blobs around random centers, or N(0, 1) noise')
    .requiredOption('--rows <n>', 'rows', positiveInt('--rows'))
    .requiredOption('--dims <d>', 'dimensions', positiveInt('--dims'))
    .option('--centers <c>', 'blob centers', positiveInt('--centers'), 8)
    .addOption(new Option('--kind <kind>', 'distribution').choices(['blobs', 'normal']).default('blobs'))
    .option('--seed <s>', 'seed', nonNegativeInt('--seed'), 0)
    .addOption(new Option('--dtype <t>', 'element type').choices(['f32', 'f16']).default('f32'))
    .option('--cluster-std <x>', 'blob standard deviation', (v: string) => {
      const n = Number(v);
      if (!(n >= 0) || !Number.isFinite(n)) throw new InvalidArgumentError('--cluster-std must be a number ≥ 0');
      return n;
    }, 1)
    .requiredOption('--out <file.npy>', 'output file')
    .option('--json', 'print the result as one JSON object')
    .action(lazy(() => import('./generate.js')));

  program
    .command('worker')
    .description('run a queue worker (REDIS_URL, KMFLEET_S3_*, KMFLEET_*: see worker/config.ts) until SIGTERM')
    .option('--concurrency <n>', 'jobs at once (default: one per GPU, else 1; KMFLEET_CONCURRENCY)', positiveInt('--concurrency'))
    .option('--queue <name>', 'queue name (KMFLEET_QUEUE, default jobs)')
    .option('--backend <b>', 'force cpu or cuda (KMFLEET_BACKEND)')
    .option('--cache-dir <dir>', 'local dataset cache (KMFLEET_CACHE_DIR)')
    .action(lazy(() => import('./worker.js')));

  program
    .command('demo')
    .description('run one job end to end on this machine: local Redis + S3 (unless configured), synthetic data, SDK, worker, report')
    .option('--rows <n>', 'rows of the synthetic dataset', positiveInt('--rows'), 1_000_000)
    .option('--dims <d>', 'dimensions', positiveInt('--dims'), 32)
    .option('--k <n>', 'clusters to fit', positiveInt('--k'), 100)
    .option('--centers <n>', 'blob centers in the data', positiveInt('--centers'), 100)
    .option('--max-iter <n>', 'iterations at most', positiveInt('--max-iter'), 20)
    .option('--seed <n>', 'seed of the data and the init', positiveInt('--seed'), 7)
    .option('--bucket <name>', 'bucket for data and outputs (created on the local S3)', 'kmfleet-demo')
    .option('--out <dir>', 'local directory for the report and summary', 'kmfleet-demo-out')
    .action(lazy(() => import('./demo.js')));

  const enqueue = program
    .command('enqueue')
    .description('validate a k-means job spec and add it to the queue (idempotent with --job-id)');
  addSpecOptions(enqueue)
    .option('--job-id <id>', 'idempotency key: the same id never makes a second job (default: a random UUID)')
    .option('--priority <n>', '1 (highest) .. 2097152; lower runs first, FIFO among equals (default 1000)')
    .option('--wait', 'then follow the job until it ends (like `kmfleet wait`)')
    .option('--timeout <ms>', 'with --wait: give up waiting after this many ms', msOption('--timeout'));
  addConnectionOptions(enqueue).action(lazy(() => import('./enqueue.js')));

  addConnectionOptions(
    program
      .command('status')
      .description('show the state, progress and result of a queued job')
      .argument('<jobId>', 'job id'),
  ).action(lazy(() => import('./status.js')));

  addConnectionOptions(
    program
      .command('wait')
      .description('follow a job until it completes (live progress); exit 0 completed, 1 failed or cancelled, 3 Redis unreachable, 4 --timeout passed')
      .argument('<jobId>', 'job id')
      .option('--timeout <ms>', 'give up after this many ms (the job goes on)', msOption('--timeout')),
  ).action(lazy(() => import('./wait.js')));

  addConnectionOptions(
    program
      .command('cancel')
      .description('cancel a job: remove it if it has not started, else tell its worker to stop')
      .argument('<jobId>', 'job id')
      .option('--wait', 'return only once a running job has stopped')
      .option('--timeout <ms>', 'with --wait: give up after this many ms (default 60000)', msOption('--timeout')),
  ).action(lazy(() => import('./cancel.js')));

  const schedule = program
    .command('schedule')
    .description('create or replace a recurring job (each run warm-starts from the previous result)')
    .argument('<name>', 'schedule name (also the default model name)')
    .option('--cron <expr>', 'cron pattern, 5 fields (6 with seconds), e.g. "0 3 * * *"')
    .option('--tz <zone>', 'IANA time zone for --cron, e.g. Europe/Berlin (default UTC)')
    .option('--every <duration>', 'run this often instead of a cron pattern: 15m, 1h, 1h30m, 90s, or ms')
    .option('--limit <n>', 'stop after this many runs')
    .option('--priority <n>', '1 (highest) .. 2097152 (default 1000)');
  addSpecOptions(schedule, 'previous');
  addConnectionOptions(schedule).action(lazy(() => import('./schedule.js')));

  addConnectionOptions(program.command('schedules').description('list the recurring jobs')).action(lazy(() => import('./schedules.js')));

  addConnectionOptions(
    program.command('unschedule').description('remove a recurring job').argument('<name>', 'schedule name'),
  ).action(lazy(() => import('./unschedule.js')));

  addConnectionOptions(
    program
      .command('history')
      .description('results of a named model, newest first')
      .argument('<name>', 'model name')
      .option('--limit <n>', 'at most this many results (default 20)'),
  ).action(lazy(() => import('./history.js')));

  addConnectionOptions(
    program
      .command('dashboard')
      .description('serve a web dashboard of the queue, job progress and convergence curves')
      .option('--port <n>', 'HTTP port', '8080')
      .option('--host <addr>', 'address to listen on (0.0.0.0 to expose it: there is no login)', '127.0.0.1')
      .option(
        '--allowed-host <name>',
        'also answer requests whose Host is NAME or NAME:PORT, e.g. a reverse proxy\'s public name (repeatable); ' +
          'only localhost, 127.0.0.1, [::1] and the bound address are answered otherwise (421: DNS rebinding)',
        (v: string, prev: string[] = []) => [...prev, v],
      )
      .option('--allow-actions', 'show cancel, retry, remove and promote buttons (off: read-only)')
      // the flag's name before retry, remove and promote joined cancel
      .addOption(new Option('--allow-cancel').hideHelp().implies({ allowActions: true })),
  ).action(lazy(() => import('./dashboard.js')));

  addConnectionOptions(
    program
      .command('api')
      .description('serve the HTTP API for producers in any language (enqueue, wait, cancel, results, schedules; docs/api.md)')
      .option('--port <n>', 'HTTP port (0: any free port)', '8090')
      .option('--host <addr>', 'address to listen on; other than loopback only with a token (KMFLEET_API_TOKEN[_FILE])', '127.0.0.1')
      .option('--allowed-host <name>', 'also serve requests whose Host is NAME (any port) or NAME:PORT (repeatable)', (v: string, all: string[] = []) => [...all, v]),
  ).action(lazy(() => import('./api.js')));
}
