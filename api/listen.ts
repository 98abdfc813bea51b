/**
 * Where `kmfleet api` listens: loopback by default; any other address only with a bearer token (api/token.ts), because
 * the API enqueues and cancels jobs that read and write the fleet's buckets.
 */
import { isIP } from 'node:net';

export const DEFAULT_API_HOST = '127.0.0.1';
export const DEFAULT_API_PORT = 8090;

/** 127.0.0.0/8, ::1 (also as an IPv4-mapped address) and the name localhost. */
export function isLoopbackAddress(host: string): boolean {
  const h = host.toLowerCase().replace(/^\[(.*)\]$/, '$1');
  if (h === 'localhost') return true;
  if (isIP(h) === 4) return h.startsWith('127.');
  if (isIP(h) === 6) return h === '::1' || /^(0{0,4}:){1,5}:?ffff:127\./.test(h) || /^::ffff:127\./.test(h);
  return false;
}
