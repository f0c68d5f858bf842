import { describe, expect, it } from 'vitest';
import { parseCidrs, peerIn, proxyIdentity, type ProxyTrust } from './proxy.js';

const trust: ProxyTrust = {
  cidrs: parseCidrs('10.1.0.0/16, 192.168.5.7, fd00::/8'),
  secret: () => 'proxy-secret-value',
  emailHeader: 'x-forwarded-email',
  groupsHeader: 'x-forwarded-groups',
  secretHeader: 'x-console-proxy-secret',
  operatorGroups: new Set(['ops']),
  readerGroups: new Set(['staff']),
};
const headers = (extra: Record<string, string> = {}) => ({
  'x-forwarded-email': 'ada@example.com',
  'x-forwarded-groups': 'staff,ops',
  'x-console-proxy-secret': 'proxy-secret-value',
  ...extra,
});

describe('trusted proxy headers', () => {
  it('believes a proxy address with the secret, and maps groups to roles', () => {
    expect(proxyIdentity(trust, '10.1.2.3', headers())).toEqual({ user: 'ada@example.com', role: 'operator' });
    expect(proxyIdentity(trust, '::ffff:10.1.2.3', headers({ 'x-forwarded-groups': 'staff' }))).toEqual({
      user: 'ada@example.com',
      role: 'reader',
    });
    expect(proxyIdentity(trust, 'fd00::1', headers())?.role).toBe('operator');
  });

  it('ignores the headers from any other address, whatever they say', () => {
    for (const peer of ['127.0.0.1', '10.2.0.1', '192.168.5.8', '::1', undefined, 'not-an-ip']) {
      expect(proxyIdentity(trust, peer, headers())).toBeUndefined();
    }
  });

  it('ignores them without the secret, with a wrong one, or with no role-giving group or no e-mail', () => {
    expect(proxyIdentity(trust, '10.1.2.3', headers({ 'x-console-proxy-secret': 'guess' }))).toBeUndefined();
    const { 'x-console-proxy-secret': _, ...noSecret } = headers();
    expect(proxyIdentity(trust, '10.1.2.3', noSecret)).toBeUndefined();
    expect(proxyIdentity(trust, '10.1.2.3', headers({ 'x-forwarded-groups': 'everyone' }))).toBeUndefined();
    expect(proxyIdentity(trust, '10.1.2.3', headers({ 'x-forwarded-email': '' }))).toBeUndefined();
    expect(proxyIdentity(trust, '10.1.2.3', headers({ 'x-forwarded-email': '<script>@x' }))).toBeUndefined();
    expect(proxyIdentity(undefined, '10.1.2.3', headers())).toBeUndefined();
    expect(proxyIdentity({ ...trust, secret: () => undefined }, '10.1.2.3', headers())).toBeUndefined();
  });

  it('refuses a header given twice (headersDistinct): a client-sent group the proxy appended to is not a list', () => {
    const distinct = (extra: Record<string, string[]> = {}) => ({
      'x-forwarded-email': ['ada@example.com'],
      'x-forwarded-groups': ['staff'],
      'x-console-proxy-secret': ['proxy-secret-value'],
      ...extra,
    });
    expect(proxyIdentity(trust, '10.1.2.3', distinct())).toEqual({ user: 'ada@example.com', role: 'reader' });
    expect(proxyIdentity(trust, '10.1.2.3', distinct({ 'x-forwarded-groups': ['staff', 'ops'] }))).toBeUndefined();
    expect(
      proxyIdentity(trust, '10.1.2.3', distinct({ 'x-forwarded-email': ['ada@example.com', 'eve@example.com'] })),
    ).toBeUndefined();
    expect(
      proxyIdentity(trust, '10.1.2.3', distinct({ 'x-console-proxy-secret': ['proxy-secret-value', 'x'] })),
    ).toBeUndefined();
  });

  it('refuses CIDR lists that are not', () => {
    for (const bad of ['10.0.0.0/33', 'example.com', '10.0.0.0/8/1', '10.0.0.0/x']) {
      expect(() => parseCidrs(bad)).toThrow();
    }
    expect(peerIn(parseCidrs(''), '127.0.0.1')).toBe(false);
  });
});
