import { Writable } from 'node:stream';
import Fastify, { type FastifyBaseLogger } from 'fastify';
import { afterEach, describe, expect, it } from 'vitest';
import { canonicalAddress } from '@outreach/contracts';
import { createLogger, maskAddresses, requestPath } from './logger.js';

function capture() {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _encoding, done) {
      lines.push(...chunk.toString('utf8').split('\n').filter(Boolean));
      done();
    },
  });
  return { lines, logger: createLogger({ name: 'log-test', level: 'debug' }, stream) };
}

const ADDRESSES = [
  'ada@example.com',
  'Ada.Lovelace+jobs@Example.COM',
  'jos\u00e9@b\u00fccher.de',
  'x@xn--bcher-kva.de',
];
const leaks = (lines: readonly string[]) =>
  lines.filter((line) =>
    ADDRESSES.some((a) => line.toLowerCase().includes(a.toLowerCase()) || line.includes(encodeURIComponent(a))),
  );

const apps: Array<ReturnType<typeof Fastify>> = [];
afterEach(async () => {
  for (const app of apps.splice(0)) await app.close();
});

describe('request logs', () => {
  it('drop the query string and mask address path segments, however they are encoded', async () => {
    const { lines, logger } = capture();
    const app = Fastify({ loggerInstance: logger as FastifyBaseLogger });
    apps.push(app);
    app.get('/v1/suppressions/:email', async () => ({ ok: true }));
    app.get('/v1/sends/check', async () => ({ ok: true }));
    for (const url of [
      '/v1/suppressions/ada@example.com',
      '/v1/suppressions/ada%40example.com',
      '/v1/suppressions/ada%2540example.com',
      `/v1/suppressions/${encodeURIComponent('Ada.Lovelace+jobs@Example.COM')}`,
      `/v1/sends/check?campaignId=c&email=${encodeURIComponent('jos\u00e9@b\u00fccher.de')}`,
      '/v1/sends/check?email=x@xn--bcher-kva.de#frag',
    ]) {
      expect((await app.inject({ url })).statusCode).toBe(200);
    }
    expect(leaks(lines)).toEqual([]);
    const urls = lines
      .map((line) => JSON.parse(line) as { req?: { url: string; route?: string } })
      .flatMap((l) => l.req ?? []);
    expect(urls.map((r) => r.url)).toEqual([
      '/v1/suppressions/[address]',
      '/v1/suppressions/[address]',
      '/v1/suppressions/[address]',
      '/v1/suppressions/[address]',
      '/v1/sends/check',
      '/v1/sends/check',
    ]);
    expect(urls[0]?.route).toBe('/v1/suppressions/:email');
  });
});

describe('redaction and the last pass', () => {
  it('redacts address and content fields, and the row values PostgreSQL quotes in an error detail', () => {
    const { lines, logger } = capture();
    logger.info({ email: 'ada@example.com', send: { emailNorm: 'ada@example.com', body: 'Dear Ada' } }, 'fields');
    const pgError = Object.assign(new Error('duplicate key value violates unique constraint'), {
      code: '23505',
      detail: 'Key (email_norm)=(ada@example.com) already exists.',
    });
    logger.error({ err: pgError }, 'insert failed');
    expect(leaks(lines)).toEqual([]);
    expect(lines.join('\n')).not.toContain('Dear Ada');
    expect(JSON.parse(lines[1] as string)).toMatchObject({ err: { code: '23505', detail: '[redacted]' } });
  });

  it('masks whatever is address-shaped in messages, reasons and stacks', () => {
    const { lines, logger } = capture();
    logger.warn(
      { reason: '550 5.1.1 <Ada.Lovelace+jobs@Example.COM>: Recipient address rejected' },
      'provider refused',
    );
    logger.error(new Error('cannot deliver to jos\u00e9@b\u00fccher.de'));
    logger.info('sending to ada@example.com now');
    expect(leaks(lines)).toEqual([]);
    expect(lines[0]).toContain('550 5.1.1 <[address]>: Recipient address rejected');
  });

  it('masks every spelling the platform itself reads as an address, invisible characters included', () => {
    const { lines, logger } = capture();
    const spellings = [
      'ada@example.com',
      'ADA@EXAMPLE.COM',
      'ada%40example.com',
      'ada@exa\u200bmple.com', // zero-width space inside the domain
      'ada\u200b@example.com', // zero-width space before the at-sign
      'ada@ex\u00adample.com', // soft hyphen
      'ada@ex\u2060ample.com', // word joiner
      'ada@b\u00fccher.de',
      'ada@xn--bcher-kva.de',
      'ada@\uff45\uff58\uff41\uff4d\uff50\uff4c\uff45.com', // full-width domain
      'ada@example\u3002com', // ideographic full stop
      'ada@example\uff0ecom',
    ];
    for (const spelling of spellings) {
      expect(canonicalAddress(decodeURIComponent(spelling))?.norm, spelling).toMatch(/^ada@/);
      logger.warn({ reason: `unknown experiment ${spelling}` }, 'rejected outreach request');
      logger.info(`request ${spelling}: no content`);
    }
    const leaked = spellings.filter((spelling) =>
      lines.some((line) => line.includes(JSON.stringify(spelling).slice(1, -1))),
    );
    expect(leaked).toEqual([]);
    expect(maskAddresses('to ada@exa\u200bmple.com, now')).toBe('to [address], now');
  });

  it('leaves what only looks a little like an address alone', () => {
    expect(maskAddresses('postgres://postgres@127.0.0.1:5432/test')).toBe('postgres://postgres@127.0.0.1:5432/test');
    expect(maskAddresses('no at sign here')).toBe('no at sign here');
    expect(maskAddresses('mail ada\uff20example\uff0ecom')).toBe('mail [address]');
  });

  it('keeps requestPath cheap and total on malformed input', () => {
    expect(requestPath('/v1/x/%E0%A4%A?email=a@b.c')).toBe('/v1/x/%E0%A4%A');
    expect(requestPath('')).toBe('');
    const long = `/${'a'.repeat(100_000)}@`;
    const started = performance.now();
    maskAddresses(long + '.'.repeat(100_000));
    expect(requestPath(long)).toBe('/[address]');
    expect(performance.now() - started).toBeLessThan(1_000);
  });
});
