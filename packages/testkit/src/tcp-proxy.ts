import { connect, createServer, type Server, type Socket } from 'node:net';

export interface TcpProxy {
  readonly port: number;
  /** Holds every byte until `thaw`, connections open: a network partition. */
  freeze(): void;
  thaw(): void;
  /** Drops the open connections' bytes for good while new ones work (a firewall or NAT that lost its entries). */
  blackholeExisting(): void;
  /** Resets every connection and every new one until `restore`: the dependency is down. */
  refuse(): void;
  restore(): void;
  close(): Promise<void>;
}

/** A TCP proxy in front of a real dependency, whose failures a test makes happen for real. */
export async function tcpProxy(targetPort: number, targetHost = '127.0.0.1'): Promise<TcpProxy> {
  let frozen = false;
  let refusing = false;
  const held: Array<() => void> = [];
  const sockets = new Set<Socket>();
  const blackholed = new WeakSet<Socket>();
  const forward = (from: Socket, to: Socket) =>
    from.on('data', (chunk) => {
      if (blackholed.has(from)) return;
      if (frozen) held.push(() => to.write(chunk));
      else to.write(chunk);
    });
  const server: Server = createServer((client) => {
    if (refusing) {
      client.resetAndDestroy();
      return;
    }
    const upstream = connect(targetPort, targetHost);
    for (const socket of [client, upstream]) {
      sockets.add(socket);
      socket.on('error', () => undefined);
      socket.on('close', () => {
        client.destroy();
        upstream.destroy();
        sockets.delete(socket);
      });
    }
    forward(client, upstream);
    forward(upstream, client);
  });
  await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', resolve));
  const port = (server.address() as { port: number }).port;
  return {
    port,
    freeze: () => {
      frozen = true;
    },
    thaw: () => {
      frozen = false;
      for (const send of held.splice(0)) send();
    },
    blackholeExisting: () => {
      for (const socket of sockets) blackholed.add(socket);
    },
    refuse: () => {
      refusing = true;
      for (const socket of sockets) socket.resetAndDestroy();
    },
    restore: () => {
      refusing = false;
    },
    close: async () => {
      for (const socket of sockets) socket.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}
