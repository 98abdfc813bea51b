// Rows the engine reads from their file on a CUDA engine: test/unit/engine-feed-file.test.ts with
// KMFLEET_TEST_BACKEND=cuda (rows past the host tier go up through the upload ring's page-locked pieces).
process.env.KMFLEET_TEST_BACKEND = 'cuda';
await import('../unit/engine-feed-file.test.js');
