/**
 * One HTTP request with full control of the headers (fetch refuses to set Host), for the API tests:
 *   const r = await httpCall(url, 'POST', '/v1/jobs', { body: {...}, token, host: 'evil.example' });
 *   r.status, r.headers, r.text, r.json()
 */
import { request } from 'node:http';

export interface HttpAnswer {
  status: number;
  headers: Record<string, string | string[] | undefined>;
  text: string;
  json(): any; // eslint-disable-line @typescript-eslint/no-explicit-any
}

export function httpCall(
  base: string,
  method: string,
  path: string,
  opts: { body?: unknown; rawBody?: string; contentType?: string; token?: string; host?: string; headers?: Record<string, string> } = {},
): Promise<HttpAnswer> {
  const url = new URL(path, base);
  const payload = opts.rawBody ?? (opts.body !== undefined ? JSON.stringify(opts.body) : undefined);
  const headers: Record<string, string> = { ...opts.headers };
  if (payload !== undefined) headers['Content-Type'] = opts.contentType ?? 'application/json';
  if (opts.token) headers.Authorization = `Bearer ${opts.token}`;
  if (opts.host) headers.Host = opts.host;
  return new Promise((resolve, reject) => {
    const req = request(url, { method, headers, agent: false }, (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => (text += d));
      res.on('end', () => resolve({ status: res.statusCode ?? 0, headers: res.headers, text, json: () => JSON.parse(text) }));
      res.on('error', reject);
    });
    req.on('error', reject);
    req.end(payload);
  });
}
