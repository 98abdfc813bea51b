/**
 * Which Host headers kmfleet's HTTP servers answer: `kmfleet dashboard` (dashboard/server.ts) and `kmfleet api`
 * (api/server.ts) refuse the others with 421, on every path.
 *
 * A DNS-rebinding page is served from its own name, then points that name at 127.0.0.1: the browser treats the
 * dashboard as that page's origin, but still sends the page's name as Host. So only names that are ours are answered:
 *   - localhost, 127.0.0.1, [::1], on any port (an `ssh -L 9000:localhost:8080` tunnel arrives as localhost:9000);
 *   - the address the server is bound to, with the port the request came in on (bound to 0.0.0.0 or ::, each address
 *     of this machine);
 *   - the names given as allowedHosts (`--allowed-host`): `name` for any port, `name:port` for that port only, for a
 *     reverse proxy that forwards its own public name.
 */
import { isIP } from 'node:net';
import { networkInterfaces } from 'node:os';
import { ArgumentError } from './errors/index.js';

interface HostName {
  /** lowercase; IPv6 in brackets */
  name: string;
  port?: number;
}

const LOOPBACK = new Set(['localhost', '127.0.0.1', '[::1]']);

/** `name`, `name:port`, `[v6]` or `[v6]:port` as Host headers carry them, lowercased; null for anything else. */
function parseHost(value: string): HostName | null {
  const m = /^(\[[0-9a-f:.]+\]|[a-z0-9_-]+(?:\.[a-z0-9_-]+)*)(?::(\d{1,5}))?$/i.exec(value);
  if (!m) return null;
  const port = m[2] === undefined ? undefined : Number(m[2]);
  if (port !== undefined && port > 65535) return null;
  return { name: m[1].toLowerCase(), port };
}

/** How an address appears in a Host header: IPv6 in brackets. */
const asHostName = (address: string) => (isIP(address) === 6 ? `[${address.toLowerCase()}]` : address.toLowerCase());

/** The names the server is reachable at on its bound address; a wildcard address means every address of this machine. */
function boundNames(host: string): string[] {
  if (host !== '0.0.0.0' && host !== '::') return [asHostName(host)];
  const out: string[] = [];
  for (const list of Object.values(networkInterfaces())) {
    for (const a of list ?? []) {
      // a link-local address needs a zone (fe80::1%eth0), which no Host header can carry
      if (host === '0.0.0.0' && a.family !== 'IPv4') continue;
      if (!a.address.includes('%')) out.push(asHostName(a.address));
    }
  }
  return out;
}

export interface HostAllowance {
  /**
   * Whether a request with this Host header (undefined: none) is for this server; `localPort` is the port it came in
   * on (req.socket.localPort), which a Host naming the bound address must carry.
   */
  allows(hostHeader: string | undefined, localPort: number | undefined): boolean;
}

/**
 * The rule for a server bound to `host`. Throws ArgumentError naming an allowedHosts entry that is not a host
 * name (a URL, a path, a space...), so a mistyped --allowed-host fails at start, not as refused requests.
 */
export function hostAllowance(o: { host: string; allowedHosts?: readonly string[] }): HostAllowance {
  const extra = (o.allowedHosts ?? []).map((v) => {
    const h = parseHost(v);
    if (!h) throw new ArgumentError(`--allowed-host ${JSON.stringify(v)} must be a host name, optionally with :port (e.g. kmfleet.example.com or proxy:8443)`);
    return h;
  });
  const bound = new Set(boundNames(o.host));
  return {
    allows(hostHeader, localPort) {
      const h = hostHeader === undefined ? null : parseHost(hostHeader);
      if (!h) return false;
      if (LOOPBACK.has(h.name)) return true;
      if (bound.has(h.name) && (h.port ?? 80) === localPort) return true;
      return extra.some((e) => e.name === h.name && (e.port === undefined || e.port === (h.port ?? 80)));
    },
  };
}
