/**
 * A raw, scriptable SMTP peer on node:net for attack tests: every reply is written by the script, so
 * it can send what no well-behaved server library would (split replies, garbage, stray lines, a
 * 421 greeting, a stall in the middle of EHLO). It counts a message as received when its final dot
 * arrives, whatever it answers: that is what a user would see in a mailbox if the server queued it.
 */
import { createServer, type Server, type Socket } from 'node:net';

export interface Conversation {
  readonly socket: Socket;
  /** 1-based number of this connection. */
  readonly connection: number;
  write(text: string): void;
}

export interface Script {
  /** Default: `220 raw ESMTP`. */
  greeting?(c: Conversation): void;
  /** Default: `250-raw`, `250 PIPELINING` unless `pipelining` is false. */
  ehlo?(c: Conversation): void;
  pipelining?: boolean;
  /** `n` is the 1-based transaction number across connections. Default `250 ok`. */
  mail?(c: Conversation, n: number): void;
  rcpt?(c: Conversation, n: number): void;
  /** Default `354 go`. */
  data?(c: Conversation, n: number): void;
  /** After the message is received in full (already counted). Default `250 ok queued`. */
  dot?(c: Conversation, n: number): void;
}

export interface Received {
  readonly transaction: number;
  readonly connection: number;
  readonly messageId: string | undefined;
  readonly raw: string;
}

export class RawSmtp {
  readonly received: Received[] = [];
  transactions = 0;
  connections = 0;
  private server: Server | undefined;
  private readonly sockets = new Set<Socket>();
  port = 0;

  constructor(private readonly script: Script = {}) {}

  async start(): Promise<this> {
    const server = createServer((socket) => this.serve(socket));
    this.server = server;
    await new Promise<void>((resolve) => server.listen(0, '127.0.0.1', () => resolve()));
    this.port = (server.address() as { port: number }).port;
    return this;
  }

  private serve(socket: Socket): void {
    this.sockets.add(socket);
    socket.on('close', () => this.sockets.delete(socket));
    socket.on('error', () => undefined);
    const c: Conversation = {
      socket,
      connection: ++this.connections,
      write: (text) => {
        if (!socket.destroyed) socket.write(text);
      },
    };
    const s = this.script;
    let buffer = '';
    let inData = false;
    let body = '';
    let n = 0;
    (s.greeting ?? ((cv) => cv.write('220 raw ESMTP\r\n')))(c);
    socket.on('data', (chunk) => {
      buffer += chunk.toString('latin1');
      for (;;) {
        if (inData) {
          body += buffer;
          buffer = '';
          // An empty message: the dot right after DATA.
          const at = body.startsWith('.\r\n') ? -2 : body.indexOf('\r\n.\r\n');
          if (at === -1) return;
          const raw = at < 0 ? '' : body.slice(0, at);
          buffer = at < 0 ? body.slice(3) : body.slice(at + 5);
          body = '';
          inData = false;
          const messageId = /^Message-ID:\s*(<[^>]+>)/im.exec(raw)?.[1];
          // An empty message (a client ending a DATA it should not have got) reaches nobody.
          if (raw !== '') this.received.push({ transaction: n, connection: c.connection, messageId, raw });
          (s.dot ?? ((cv) => cv.write('250 ok queued\r\n')))(c, n);
          continue;
        }
        const eol = buffer.indexOf('\r\n');
        if (eol < 0) return;
        const line = buffer.slice(0, eol);
        buffer = buffer.slice(eol + 2);
        const verb = line.slice(0, 4).toUpperCase();
        if (verb === 'EHLO' || verb === 'HELO') {
          (s.ehlo ?? ((cv) => cv.write(s.pipelining === false ? '250 raw\r\n' : '250-raw\r\n250 PIPELINING\r\n')))(c);
        } else if (verb === 'MAIL') {
          n = ++this.transactions;
          (s.mail ?? ((cv) => cv.write('250 ok\r\n')))(c, n);
        } else if (verb === 'RCPT') {
          (s.rcpt ?? ((cv) => cv.write('250 ok\r\n')))(c, n);
        } else if (verb === 'DATA') {
          inData = true;
          (s.data ?? ((cv) => cv.write('354 go\r\n')))(c, n);
        } else if (verb === 'RSET' || verb === 'NOOP') {
          c.write('250 ok\r\n');
        } else if (verb === 'QUIT') {
          c.write('221 bye\r\n');
          socket.end();
        } else {
          c.write('502 unknown\r\n');
        }
      }
    });
  }

  /** Messages received per Message-ID: more than one is a second copy. */
  copies(): Map<string | undefined, number> {
    const counts = new Map<string | undefined, number>();
    for (const m of this.received) counts.set(m.messageId, (counts.get(m.messageId) ?? 0) + 1);
    return counts;
  }

  async stop(): Promise<void> {
    for (const socket of this.sockets) socket.destroy();
    const server = this.server;
    if (server) await new Promise<void>((resolve) => server.close(() => resolve()));
  }
}
