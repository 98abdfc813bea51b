/**
 * A TCP proxy on a random loopback port in front of a real server, that can cut one client off from it: a network
 * partition between one process and, say, Redis, while everything else keeps talking to the server directly.
 *
 *   const proxy = await startTcpProxy(redis.port);       // the partitioned process connects to proxy.port
 *   proxy.partition();                                    // live connections die, new ones hang unanswered
 *   proxy.heal();                                         // new connections go through again
 *   await proxy.loseNextReply();                          // the server runs the next request, its answer is lost
 *   await proxy.loseNextReply({ openForMs: 250 });        // the same, on a connection past its handshake
 *   await proxy.stop();
 */
import { createServer, connect, type Socket } from 'node:net';

export interface TcpProxy {
  readonly port: number;
  partition(): void;
  heal(): void;
  /**
   * The next bytes the server sends back are dropped and that connection is cut: the server has run the request, the
   * client never hears so (as when a link fails between the two). Resolves once it has happened. With `openForMs` only
   * a connection open at least that long loses it: losses that fall on each reconnect's handshake would otherwise
   * keep one client cut off for as long as they go on.
   */
  loseNextReply(opts?: { openForMs?: number }): Promise<void>;
  stop(): Promise<void>;
}

export async function startTcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  const live = new Set<Socket>();
  let cut = false;
  let loseReply: { openForMs: number; lost: () => void } | undefined;
  const server = createServer((client) => {
    live.add(client);
    client.on('close', () => live.delete(client));
    client.on('error', () => {});
    // while partitioned a new connection is accepted and then hears nothing, as behind a dropped route
    if (cut) return;
    const upstream = connect(targetPort, targetHost);
    live.add(upstream);
    upstream.on('close', () => {
      live.delete(upstream);
      client.destroy();
    });
    upstream.on('error', () => client.destroy());
    client.on('close', () => upstream.destroy());
    client.pipe(upstream);
    const openedAt = Date.now();
    upstream.on('data', (chunk: Buffer) => {
      if (!loseReply || Date.now() - openedAt < loseReply.openForMs) return void client.write(chunk);
      const { lost } = loseReply;
      loseReply = undefined;
      client.destroy();
      upstream.destroy();
      lost();
    });
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    partition() {
      cut = true;
      for (const s of live) s.destroy();
    },
    heal() {
      cut = false;
      // connections opened during the partition never got through: drop them so the client reconnects
      for (const s of live) s.destroy();
    },
    loseNextReply(opts = {}) {
      return new Promise<void>((resolve) => (loseReply = { openForMs: opts.openForMs ?? 0, lost: resolve }));
    },
    async stop() {
      for (const s of live) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
