/** The SDK's path to the root classes of every kmfleet error (errors/: a leaf every layer may import). */
export { KmfleetError, KmfleetInputError } from '../../errors/index.js';
