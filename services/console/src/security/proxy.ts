/**
 * Sign-in by a trusted OIDC proxy (oauth2-proxy, an ingress's auth): its headers name the user and
 * their groups. They are believed only from a peer inside CONSOLE_PROXY_CIDRS **and** with the
 * shared secret header, so neither a client that reaches the console directly nor a neighbour on the
 * proxy's network can name itself. The peer is the socket's address, never X-Forwarded-For.
 */
import { timingSafeEqual } from 'node:crypto';
import { BlockList, isIP } from 'node:net';
import type { Role } from './session.js';

export interface ProxyTrust {
  readonly cidrs: BlockList;
  readonly secret: () => string | undefined;
  readonly emailHeader: string;
  readonly groupsHeader: string;
  readonly secretHeader: string;
  readonly operatorGroups: ReadonlySet<string>;
  readonly readerGroups: ReadonlySet<string>;
}

/** `10.0.0.0/8, 192.168.1.5, fd00::/8` as a BlockList; throws naming the entry that is not one. */
export function parseCidrs(text: string): BlockList {
  const list = new BlockList();
  for (const entry of text
    .split(',')
    .map((s) => s.trim())
    .filter(Boolean)) {
    const [address, bits, ...rest] = entry.split('/');
    const family = isIP(address ?? '');
    if (family === 0 || rest.length > 0) throw new Error(`${entry} is not an address or CIDR`);
    const type = family === 4 ? 'ipv4' : 'ipv6';
    if (bits === undefined) {
      list.addAddress(address as string, type);
      continue;
    }
    const prefix = Number(bits);
    if (!/^\d{1,3}$/.test(bits) || prefix > (family === 4 ? 32 : 128)) throw new Error(`${entry} has a bad prefix`);
    list.addSubnet(address as string, prefix, type);
  }
  return list;
}

/** Whether the peer address is in the list (an IPv4-mapped IPv6 address counts as its IPv4 one). */
export function peerIn(list: BlockList, address: string | undefined): boolean {
  if (address === undefined) return false;
  const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
  const peer = mapped ? (mapped[1] as string) : address;
  const family = isIP(peer);
  if (family === 0) return false;
  return list.check(peer, family === 4 ? 'ipv4' : 'ipv6');
}

/**
 * One header's value, or undefined when it is missing or given more than once. Give it the request's
 * `headersDistinct`: Node joins a repeated `X-Forwarded-Groups` into one comma list, so a client's own
 * header and the one a proxy appends (rather than replaces) would read as one list of groups.
 */
const header = (headers: Readonly<Record<string, string | string[] | undefined>>, name: string) => {
  const value = headers[name.toLowerCase()];
  if (Array.isArray(value)) return value.length === 1 ? value[0] : undefined;
  return typeof value === 'string' ? value : undefined;
};

/**
 * The identity the proxy vouches for, or undefined: from an untrusted peer, without the secret, with
 * no e-mail, or with no group that maps to a role (the operator group wins over the reader group).
 */
export function proxyIdentity(
  trust: ProxyTrust | undefined,
  peer: string | undefined,
  headers: Readonly<Record<string, string | string[] | undefined>>,
): { user: string; role: Role } | undefined {
  if (trust === undefined || !peerIn(trust.cidrs, peer)) return undefined;
  const secret = trust.secret();
  const given = header(headers, trust.secretHeader);
  if (secret === undefined || given === undefined) return undefined;
  const a = Buffer.from(secret);
  const b = Buffer.from(given);
  if (a.length !== b.length || !timingSafeEqual(a, b)) return undefined;
  const email = header(headers, trust.emailHeader)?.trim();
  if (!email || email.length > 320 || !/^[^\s<>"'`]+$/.test(email)) return undefined;
  const groups = (header(headers, trust.groupsHeader) ?? '')
    .split(',')
    .map((g) => g.trim())
    .filter(Boolean);
  if (groups.some((g) => trust.operatorGroups.has(g))) return { user: email, role: 'operator' };
  if (groups.some((g) => trust.readerGroups.has(g))) return { user: email, role: 'reader' };
  return undefined;
}
