// The engine's tiers on a CUDA engine: test/unit/engine-host-tier.test.ts with KMFLEET_TEST_BACKEND=cuda (rows kept in
// page-locked host memory and streamed to the device from there give the bits of rows fed by the caller).
process.env.KMFLEET_TEST_BACKEND = 'cuda';
await import('../unit/engine-host-tier.test.js');
