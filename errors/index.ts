/**
 * The root of kmfleet's errors: a leaf module every layer may import (docs/DESIGN.md, "Layer rules"). The error
 * classes themselves live with what throws them; each has a `code` of exit-status.ts.
 */
export { KmfleetError } from './kmfleet-error.js';
export { KmfleetInputError } from './kmfleet-input-error.js';
export { EXIT_STATUS, type ErrorCode, type ExitStatus, type InputErrorCode } from './exit-status.js';
