// fp16 and bf16 jobs over f32 rows on a CUDA engine: test/unit/engine-narrowed-rows.test.ts with
// KMFLEET_TEST_BACKEND=cuda (the rows rounded on the host, kept 16-bit on the device and in the page-locked host tier,
// give the bits of the dataset stored in that type).
process.env.KMFLEET_TEST_BACKEND = 'cuda';
await import('../unit/engine-narrowed-rows.test.js');
