/**
 * One snapshot of the username and password per login (password-sasl.ts), shown with kafkajs' PLAIN
 * against a scripted broker side; the real broker's SCRAM is in test/int/secured-rotation.int.test.ts.
 */
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
