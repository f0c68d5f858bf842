/**
 * One snapshot of the username and password per login (password-sasl.ts), shown with kafkajs' PLAIN
 * against a scripted broker side; the real broker's SCRAM is in test/int/secured-rotation.int.test.ts.
 */
import { createHash, createHmac, pbkdf2Sync, randomBytes } from 'node:crypto';
import { createRequire } from 'node:module';
import type { AuthenticationProviderArgs, Logger } from 'kafkajs';
import { describe, expect, it } from 'vitest';
import { snapshotAuthenticator } from './password-sasl.js';

const logger = { debug: () => undefined, error: () => undefined } as unknown as Logger;

function broker() {
  const sent: string[] = [];
  const saslAuthenticate = (async ({ request }: { request: { encode(): Buffer | Promise<Buffer> } }) => {
    sent.push((await request.encode()).subarray(4).toString());
    return true;
  }) as AuthenticationProviderArgs['saslAuthenticate'];
  return { sent, args: { host: 'b', port: 1, logger, saslAuthenticate } as AuthenticationProviderArgs };
}

describe('PLAIN and SCRAM from one snapshot per login', () => {
  it('asks for the credentials once per authentication and sends that pair, whatever changes after', async () => {
    let calls = 0;
    const pairs = [
      { username: 'sender', password: 'old' },
      { username: 'publisher', password: 'new' },
    ];
    const provider = snapshotAuthenticator('plain', () => pairs[Math.min(calls++, 1)] as (typeof pairs)[number]);
    const { sent, args } = broker();
    await provider?.(args).authenticate();
    await provider?.(args).authenticate();
    expect(calls).toBe(2);
    expect(sent).toEqual(['\u0000sender\u0000old', '\u0000publisher\u0000new']);
  });

  it('covers the mechanisms kafkajs builds in, and no other', () => {
    const credentials = () => ({ username: 'u', password: 'p' });
    for (const mechanism of ['plain', 'scram-sha-256', 'scram-sha-512'])
      expect(snapshotAuthenticator(mechanism, credentials), mechanism).toBeTypeOf('function');
    expect(snapshotAuthenticator('oauthbearer', credentials)).toBeUndefined();
  });
});

/** A broker side of SCRAM-SHA-512 (RFC 5802) that knows `password`: answers the two client messages. */
function scramBroker(password: string) {
  const salt = randomBytes(16);
  const iterations = 4096;
  let clientFirstBare = '';
  let serverFirst = '';
  const hmac = (key: Buffer, text: string) => createHmac('sha512', key).update(text).digest();
  const saslAuthenticate = (async ({
    request,
    response,
  }: {
    request: { encode(): Buffer | Promise<Buffer> };
    response: { decode(raw: Buffer): Promise<Buffer>; parse(data: Buffer): Promise<unknown> };
  }) => {
    const message = (await request.encode()).subarray(4).toString();
    let answer: string;
    if (serverFirst === '') {
      clientFirstBare = message.replace(/^n,,/, '');
      serverFirst = `r=${/r=([^,]+)/.exec(clientFirstBare)?.[1] ?? ''}server,s=${salt.toString('base64')},i=${iterations}`;
      answer = serverFirst;
    } else {
      const withoutProof = message.replace(/,p=[^,]+$/, '');
      const proof = Buffer.from(/,p=([^,]+)$/.exec(message)?.[1] ?? '', 'base64');
      const salted = pbkdf2Sync(password, salt, iterations, 64, 'sha512');
      const clientKey = hmac(salted, 'Client Key');
      const authMessage = `${clientFirstBare},${serverFirst},${withoutProof}`;
      const signature = hmac(createHash('sha512').update(clientKey).digest(), authMessage);
      const expected = Buffer.from(clientKey.map((byte, i) => byte ^ (signature[i] ?? 0)));
      answer = proof.equals(expected)
        ? `v=${hmac(hmac(salted, 'Server Key'), authMessage).toString('base64')}`
        : 'e=invalid-proof';
    }
    const framed = Buffer.alloc(4 + answer.length);
    framed.writeInt32BE(answer.length);
    framed.write(answer, 4);
    return response.parse(await response.decode(framed));
  }) as unknown as AuthenticationProviderArgs['saslAuthenticate'];
  return { host: 'b', port: 1, logger, saslAuthenticate } as AuthenticationProviderArgs;
}

describe('SCRAM while the password file is rotated mid-login', () => {
  /** Credentials whose password turns to `after` once it has been read `reads` times. */
  function rotatingAfter(reads: number, before: string, after: string) {
    let count = 0;
    return {
      username: 'sender',
      get password() {
        return count++ < reads ? before : after;
      },
    };
  }

  it('logs in with the one snapshot it took, where kafkajs reading the password at each step fails', async () => {
    const require = createRequire(import.meta.url);
    const scram512 = require('kafkajs/src/broker/saslAuthenticator/scram512.js') as (
      sasl: object,
    ) => (args: AuthenticationProviderArgs) => { authenticate(): Promise<void> };
    // kafkajs as shipped, reading a live password: the proof and the server's signature disagree.
    const live = rotatingAfter(2, 'old-password', 'new-password');
    await expect(
      scram512({
        mechanism: 'scram-sha-512',
        ...{ username: live.username },
        get password() {
          return live.password;
        },
      })(scramBroker('old-password')).authenticate(),
    ).rejects.toThrow(/SCRAM SHA512 authentication failed/);

    // One snapshot per login: the same rotation in the files, a clean login with the password read first.
    let calls = 0;
    const snapshot = rotatingAfter(1, 'old-password', 'new-password');
    const provider = snapshotAuthenticator('scram-sha-512', () => {
      calls += 1;
      return { username: snapshot.username, password: snapshot.password };
    });
    await provider?.(scramBroker('old-password')).authenticate();
    expect(calls).toBe(1);
  });
});
