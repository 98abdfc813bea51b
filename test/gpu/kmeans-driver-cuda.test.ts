// The job's driver end to end on a CUDA engine: test/unit/kmeans-driver-native.test.ts with KMFLEET_TEST_BACKEND=cuda.
// On a device engine the driver begins iteration t+1 before iteration t's checkpoint and onIteration (driver.ts), so
// this is where resumed runs being bitwise identical, the data variance asked once and aborts with the newest
// checkpoint are checked against that order.
process.env.KMFLEET_TEST_BACKEND = 'cuda';
await import('../unit/kmeans-driver-native.test.js');
