/**
 * The API's bearer token: KMFLEET_API_TOKEN, or the first line of the file KMFLEET_API_TOKEN_FILE (a mounted secret;
 * the token then appears in no environment listing). Compared in constant time (hashes of equal length).
 */
import { createHash, timingSafeEqual } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { KmfleetInputError } from '../errors/index.js';

export const TOKEN_ENV = 'KMFLEET_API_TOKEN';
export const TOKEN_FILE_ENV = 'KMFLEET_API_TOKEN_FILE';
/** Shorter tokens are refused: a guessable token on a network address is no protection. */
export const MIN_TOKEN_LENGTH = 16;

/** KMFLEET_API_TOKEN / KMFLEET_API_TOKEN_FILE that cannot be used (exit code 2 in the CLI). */
export class TokenConfigError extends KmfleetInputError {
  override readonly code = 'API_TOKEN_CONFIG';
}

/** The configured token, or undefined when neither variable is set. Throws TokenConfigError on a bad setting. */
export function tokenFromEnv(env: NodeJS.ProcessEnv = process.env): string | undefined {
  const direct = env.KMFLEET_API_TOKEN;
  const file = env.KMFLEET_API_TOKEN_FILE;
  if (direct && file) throw new TokenConfigError(`set ${TOKEN_ENV} or ${TOKEN_FILE_ENV}, not both`);
  let token: string | undefined = direct;
  if (file) {
    let text: string;
    try {
      text = readFileSync(file, 'utf8');
    } catch (err) {
      throw new TokenConfigError(`${TOKEN_FILE_ENV}: cannot read ${file} (${(err as NodeJS.ErrnoException).code ?? (err as Error).message})`);
    }
    token = text.split(/\r?\n/)[0].trim();
    if (!token) throw new TokenConfigError(`${TOKEN_FILE_ENV}: ${file} is empty`);
  }
  if (token === undefined || token === '') return undefined;
  if (token.length < MIN_TOKEN_LENGTH || /\s/.test(token)) {
    throw new TokenConfigError(`the API token must be at least ${MIN_TOKEN_LENGTH} characters without spaces (e.g. \`openssl rand -hex 32\`)`);
  }
  return token;
}

const digest = (s: string) => createHash('sha256').update(s).digest();

/** Whether an Authorization header carries the token (`Bearer <token>`). */
export function bearerMatches(header: string | undefined, token: string): boolean {
  const m = /^Bearer[ ]+(\S+)\s*$/i.exec(header ?? '');
  return m !== null && timingSafeEqual(digest(m[1]), digest(token));
}
