/**
 * The Host header check: a page on another site can make a browser send requests to 127.0.0.1 under a name it controls
 * (DNS rebinding); such a request names that host. Only the loopback names, the address the server is bound to and the
 * names given with --allowed-host are served; any other Host (or none) gets 421 Misdirected Request.
 */
const LOOPBACK_NAMES = ['localhost', '127.0.0.1', '::1'];

export class HostCheck {
  private readonly allowed: Set<string>;

  constructor(boundHost: string, extra: readonly string[] = []) {
    this.allowed = new Set([...LOOPBACK_NAMES, boundHost, ...extra].map(normalize));
  }

  /** The Host header's name (without port) if it is served, else null. */
  accepts(hostHeader: string | undefined): boolean {
    if (!hostHeader) return false;
    return this.allowed.has(normalize(hostName(hostHeader)));
  }

  get names(): string[] {
    return [...this.allowed].sort();
  }
}

/** `name:port`, `[v6]:port`, `name` → the name (IPv6 without brackets). */
export function hostName(hostHeader: string): string {
  const h = hostHeader.trim();
  if (h.startsWith('[')) {
    const end = h.indexOf(']');
    return end < 0 ? h : h.slice(1, end);
  }
  const colon = h.indexOf(':');
  // more than one colon without brackets: a bare IPv6 address (not valid in Host, but then it is the name)
  return colon >= 0 && h.indexOf(':', colon + 1) < 0 ? h.slice(0, colon) : h;
}

function normalize(name: string): string {
  return name.toLowerCase().replace(/^\[(.*)\]$/, '$1').replace(/\.$/, '');
}
