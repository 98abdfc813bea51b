import { KmfleetInputError } from '../../errors/index.js';

/** REDIS_URL (or a connection option) that cannot be used. The message never contains the password. */
export class ConnectionConfigError extends KmfleetInputError {
  override readonly code = 'CONNECTION_CONFIG';
}
