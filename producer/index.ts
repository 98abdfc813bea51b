/**
 * kmfleet producer: the job contract (spec, Redis keys, job data, progress, results, cancel) and the SDK.
 * The worker imports the contract from here (or from the individual modules).
 */
export * from './spec.js';
export * from './limits.js';
export * from './s3-uri.js';
export * from './keys.js';
export * from './job-data.js';
export * from './progress.js';
export * from './job-state.js';
export * from './results.js';
export * from './cancel.js';
export * from './connection.js';
export * from './redis-cluster.js';
export * from './redis-factory.js';
export * from './eviction-policy.js';
export * from './errors/index.js';
export * from './schedule.js';
export * from './duration.js';
export * from './client.js';
